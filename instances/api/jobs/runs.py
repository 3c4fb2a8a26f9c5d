"""instances/api/jobs/runs.py: the host agent's side of managed jobs, under
/api/v1/instances/{id}/job/: what to run, that it started, its output, its TensorBoard scalars,
its exit (``Authorization: Agent ...`` of that host only)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import audit_set_object
from instances.api.fields import Base64Field
from instances.api.telemetry import AgentTokenAuthentication
from instances.models import HostAgentCredential
from instances.services.jobs import (
    job_assignment,
    job_log_append,
    job_run_exited,
    job_run_started,
    job_scalars_record,
)
from instances.services.jobs.runs import LOG_CHUNK_MAX_BYTES
from portal.lib.rest import StrictSerializer


class AssignmentSerializer(serializers.Serializer):
    job = serializers.UUIDField()
    run = serializers.IntegerField()
    rank = serializers.IntegerField(
        help_text="This node's rank in a cluster job's run (0 on a job of one host)"
    )
    command = serializers.CharField()
    env = serializers.DictField(child=serializers.CharField())
    stop_signal = serializers.CharField()
    grace_seconds = serializers.IntegerField()
    stop = serializers.BooleanField(help_text="Stop the command (signal, grace, kill) now")
    workdir = serializers.DictField(
        allow_null=True,
        help_text="The working folder to put in place first: {tarball: base64} or {git, ref}",
    )


class RunRefSerializer(StrictSerializer):
    job = serializers.UUIDField()
    run = serializers.IntegerField(min_value=1)


class StartedSerializer(RunRefSerializer):
    pid = serializers.IntegerField(min_value=1)


class ChunkSerializer(RunRefSerializer):
    offset = serializers.IntegerField(min_value=0)
    data = Base64Field(
        allow_blank=True,
        trim_whitespace=False,
        max_length=(LOG_CHUNK_MAX_BYTES * 4) // 3 + 4,
        help_text=f"Base64 of up to {LOG_CHUNK_MAX_BYTES // 1024} KiB of output",
    )


class ExitSerializer(RunRefSerializer):
    exit_code = serializers.IntegerField(allow_null=True, min_value=-255, max_value=255)
    signal = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=16, default=""
    )
    stopped = serializers.BooleanField(required=False, default=False)
    interrupted = serializers.BooleanField(required=False, default=False)


class IsHostAgent(permissions.BasePermission):
    """Only a host's own agent credential speaks here (people have no business on it)."""

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, HostAgentCredential)


class AgentView(APIView):
    """A host's agent about the job its host runs; only that host's own credential
    (``Authorization: Agent gpa_...``)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsHostAgent]

    def host(self, request, pk):
        if str(request.auth.instance_id) != str(pk):
            raise exceptions.PermissionDenied("This credential belongs to another host.")
        audit_set_object(request, f"instance:{pk}")
        return request.auth.instance

    def body(self, request, pk, serializer) -> dict:
        host = self.host(request, pk)
        incoming = serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        return {"host": host, "job_id": data.pop("job"), "number": data.pop("run"), **data}


class HostJobView(AgentView):
    @extend_schema(responses={200: AssignmentSerializer, 204: None}, auth=[{"agentToken": []}])
    def get(self, request, pk):
        """The run this host is to run (204: nothing now): its command, environment, stop
        signal and grace, and whether to stop it already."""
        assignment = job_assignment(host=self.host(request, pk))
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(AssignmentSerializer(assignment.as_dict()).data)


class StopSerializer(serializers.Serializer):
    stop = serializers.BooleanField(help_text="Stop the command (signal, grace, kill) now")


class ChunkAnswerSerializer(StopSerializer):
    offset = serializers.IntegerField(help_text="Bytes of this run's output the portal holds")
    capped = serializers.BooleanField(help_text="The portal keeps no more: send no more")


class ExitAnswerSerializer(serializers.Serializer):
    job = serializers.UUIDField()
    status = serializers.CharField()


class HostJobStartedView(AgentView):
    @extend_schema(request=StartedSerializer, responses=StopSerializer, auth=[{"agentToken": []}])
    def post(self, request, pk):
        """The command started (409 ``not_this_run``: the run is not wanted, stop it)."""
        ref = self.body(request, pk, StartedSerializer)
        return Response({"stop": job_run_started(**ref)})


class HostJobLogView(AgentView):
    @extend_schema(
        request=ChunkSerializer, responses=ChunkAnswerSerializer, auth=[{"agentToken": []}]
    )
    def post(self, request, pk):
        """Output from byte ``offset`` of the run's; answers how far the portal has it."""
        ref = self.body(request, pk, ChunkSerializer)
        return Response(job_log_append(**ref))


class ScalarPointSerializer(StrictSerializer):
    tag = serializers.CharField(max_length=128, trim_whitespace=False)
    step = serializers.IntegerField(min_value=0, max_value=2**62)
    value = serializers.FloatField()
    wall_time = serializers.FloatField(min_value=0)


class ScalarsSerializer(RunRefSerializer):
    points = serializers.ListField(child=ScalarPointSerializer(), max_length=1000)


class ScalarsAnswerSerializer(serializers.Serializer):
    stored = serializers.IntegerField()
    capped = serializers.BooleanField()


class HostJobScalarsView(AgentView):
    @extend_schema(
        request=ScalarsSerializer, responses=ScalarsAnswerSerializer, auth=[{"agentToken": []}]
    )
    def post(self, request, pk):
        """TensorBoard scalars the run wrote (read from its event files): ``stored``, and
        ``capped`` once the job has its most tags or points."""
        return Response(job_scalars_record(**self.body(request, pk, ScalarsSerializer)))


class HostJobExitView(AgentView):
    @extend_schema(
        request=ExitSerializer, responses=ExitAnswerSerializer, auth=[{"agentToken": []}]
    )
    def post(self, request, pk):
        """The command ended: its exit code or signal, and whether the agent stopped it (for
        a warning of the cloud: ``interrupted``). A repeat changes nothing."""
        ref = self.body(request, pk, ExitSerializer)
        ref["signal"] = ref["signal"] or ""
        job = job_run_exited(**ref)
        return Response({"job": str(job.pk), "status": job.status})


def host_job_urls():
    """The agent's job routes (portal/urls.py includes them)."""
    base = "api/v1/instances/<uuid:pk>/job/"
    return [
        path(base, HostJobView.as_view(), name="host-job"),
        path(f"{base}started/", HostJobStartedView.as_view(), name="host-job-started"),
        path(f"{base}log/", HostJobLogView.as_view(), name="host-job-log"),
        path(f"{base}exit/", HostJobExitView.as_view(), name="host-job-exit"),
        path(f"{base}scalars/", HostJobScalarsView.as_view(), name="host-job-scalars"),
    ]
