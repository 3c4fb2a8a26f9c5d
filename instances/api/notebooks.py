"""``/api/v1/instances/{id}/notebook/``, an action of InstanceViewSet: the host's JupyterLab
(GET: where it stands; POST: open it, 202 while it starts; DELETE: stop it), for whoever may
act on the host. The notebook itself is reached in a browser at ``url``, through the portal."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

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
