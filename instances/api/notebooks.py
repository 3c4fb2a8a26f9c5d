"""``/api/v1/instances/{id}/notebook/``, an action of InstanceViewSet: the host's JupyterLab
(GET: where it stands; POST: open it, 202 while it starts; DELETE: stop it), for whoever may
act on the host. The notebook itself is reached in a browser at ``url``, through the portal.

``/api/v1/instances/{id}/agent/notebook/``: what an EC2 host's notebook agent
(instances/agent/portal_notebook_agent.py) is to serve, for that host's own credential."""

from __future__ import annotations

from django.conf import settings
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from instances.api.jobs.runs import AgentView
from instances.models import Notebook
from instances.services import live_notebook, notebook_base_url, notebook_close, notebook_open
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import refuse_body


class NotebookSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[("none", "None"), *Notebook.Status.choices],
        help_text="none: no notebook runs on the host; starting, then running.",
    )
    url = serializers.CharField(help_text="Where it opens (on the portal), once it runs.")
    started_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="Why it failed or ended, when it did.")


def _answer(instance, notebook: Notebook | None, request) -> dict:
    if notebook is None:
        return {"status": "none", "url": "", "started_at": None, "reason": ""}
    running = notebook.status == Notebook.Status.RUNNING
    url = request.build_absolute_uri(f"{notebook_base_url(instance)}lab") if running else ""
    return {
        "status": notebook.status,
        "url": url,
        "started_at": notebook.created_at,
        "reason": notebook.reason,
    }


class NotebookActions:
    """The host's notebook, for InstanceViewSet."""

    @extend_schema(methods=["GET"], request=None, responses=NotebookSerializer)
    @extend_schema(
        methods=["POST"], request=None, responses={200: NotebookSerializer, 202: NotebookSerializer}
    )
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(detail=True, methods=["get", "post", "delete"])
    def notebook(self, request, pk=None):
        instance = self.get_object()  # first: a host the caller cannot see is a 404
        if not permissions.can_act_on_host(request.user, instance):
            raise Forbidden(
                "Only the host's owner, the project's managers and admins use its notebook."
            )
        if request.method == "GET":
            notebook = live_notebook(instance)
            if notebook is None:  # the last one, so a failure can be read
                notebook = instance.notebooks.first()
                notebook = notebook if notebook and notebook.status == "failed" else None
            return Response(NotebookSerializer(_answer(instance, notebook, request)).data)
        refuse_body(request)
        if request.method == "DELETE":
            notebook_close(instance=instance, actor=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        notebook = notebook_open(instance=instance, actor=request.user)
        answer = NotebookSerializer(_answer(instance, notebook, request)).data
        code = status.HTTP_200_OK if notebook.status == "running" else status.HTTP_202_ACCEPTED
        return Response(answer, status=code)


class NotebookAssignmentSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The server's token: only the portal's proxy uses it")
    base_url = serializers.CharField(help_text="The path it serves under, the portal's own")
    port = serializers.IntegerField(help_text="The port to serve on (PORTAL_NOTEBOOK_PORT)")


class HostNotebookView(AgentView):
    @extend_schema(
        responses={200: NotebookAssignmentSerializer, 204: None}, auth=[{"agentToken": []}]
    )
    def get(self, request, pk):
        """The JupyterLab this host is to serve while someone has it open (204: none; the
        agent stops the one it serves)."""
        instance = self.host(request, pk)
        notebook = live_notebook(instance)
        if notebook is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        answer = {
            "token": notebook.token,
            "base_url": notebook_base_url(instance),
            "port": settings.PORTAL_NOTEBOOK_PORT,
        }
        return Response(NotebookAssignmentSerializer(answer).data)


def host_notebook_urls():
    """The notebook agent's route (portal/urls.py includes it)."""
    return [
        path(
            "api/v1/instances/<uuid:pk>/agent/notebook/",
            HostNotebookView.as_view(),
            name="host-notebook-agent",
        )
    ]
