"""instances/api/jobs.py: managed jobs in the API. /api/v1/jobs/ (submit, list, one job with its
runs, hosts, recoveries and cost; its log from an offset, cancel, re-run), and the host agent's
side under /api/v1/instances/{id}/job/ (what to run, started, output, exit)."""

from __future__ import annotations

import base64
import binascii

from django.urls import path
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import audit_set_object
from instances.api.fields import MONEY, ProjectOfCaller
from instances.api.telemetry import AgentTokenAuthentication
from instances.models import (
    HostAgentCredential,
    Image,
    InstanceType,
    Job,
    JobEvent,
    JobMarket,
    JobRun,
)
from instances.selectors.costs import costs_so_far
from instances.selectors.jobs import job_log_read, job_scalar_series
from instances.services.jobs import (
    job_assignment,
    job_bounds,
    job_cancel,
    job_log_append,
    job_rerun,
    job_run_exited,
    job_run_started,
    job_scalars_record,
    job_submit,
)
from instances.services.jobs.runs import LOG_CHUNK_MAX_BYTES
from instances.services.jobs.submit import ENV_MAX_VARIABLES, EXIT_CODES_MAX, STOP_SIGNALS
from portal.lib.rest import BoundedDictField, LookupField, StrictSerializer, refuse_body
from portal.models import Project


def _bounded(name: str, **kwargs) -> serializers.IntegerField:
    """A number of JOB_BOUNDS (the service checks it; the schema states it)."""
    low, high = job_bounds(name)
    return serializers.IntegerField(min_value=low, max_value=high, **kwargs)


class JobCreateSerializer(StrictSerializer):
    project = ProjectOfCaller(
        slug_field="slug",
        queryset=Project.objects.all(),
        error_messages={"does_not_exist": "You are not a member of a project called {value}."},
    )
    name = serializers.CharField(max_length=100)
    instance_type = LookupField(
        slug_field="name",
        queryset=InstanceType.objects.offered(),
        error_messages={
            "does_not_exist": "{value} is not in the catalog; see /api/v1/instance-types/."
        },
    )
    image = LookupField(
        slug_field="name",
        queryset=Image.objects.filter(is_active=True),
        error_messages={"does_not_exist": "{value} is not an image; see /api/v1/images/."},
    )
    market = serializers.ChoiceField(choices=JobMarket.choices)
    command = serializers.CharField(
        trim_whitespace=False, help_text="Run by sh -c in the job's folder on its host"
    )
    env = BoundedDictField(
        max_length=ENV_MAX_VARIABLES,
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )
    time_limit_minutes = serializers.IntegerField(required=False, default=24 * 60)
    max_recoveries = _bounded(
        "max_recoveries",
        required=False,
        allow_null=True,
        default=None,
        help_text="Recoveries after interruptions or lost hosts; null: any within the time limit",
    )
    max_restarts = _bounded(
        "max_restarts", required=False, default=0, help_text="Runs again after its own failures"
    )
    retry_exit_codes = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=255),
        max_length=EXIT_CODES_MAX,
        required=False,
        default=list,
        help_text="Exit codes that always mean run again (within the time limit)",
    )
    stop_signal = serializers.ChoiceField(choices=STOP_SIGNALS, required=False, default="SIGTERM")
    grace_seconds = _bounded("grace_seconds", required=False, default=30)
    keep_host_minutes = _bounded(
        "keep_host_minutes",
        required=False,
        default=0,
        help_text="A failed job's last host is kept this long for its owner to look",
    )
    ssh_public_key = serializers.CharField(required=False, default="", allow_blank=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The time limit's top is a setting, read when a request (or the schema) needs it.
        low, high = job_bounds("time_limit_minutes")
        field = self.fields["time_limit_minutes"]
        field.min_value, field.max_value = low, high
        field.validators = [
            *field.validators,
            *serializers.IntegerField(min_value=low, max_value=high).validators,
        ]


class JobEventSerializer(serializers.ModelSerializer):
    host = serializers.UUIDField(source="host_id", allow_null=True)

    class Meta:
        model = JobEvent
        fields = ["old_status", "new_status", "reason", "at", "actor", "host"]


class JobRunSerializer(serializers.ModelSerializer):
    host = serializers.UUIDField(source="host_id")

    class Meta:
        model = JobRun
        fields = [
            "number",
            "host",
            "recovery",
            "handed_at",
            "started_at",
            "ended_at",
            "exit_code",
            "signal",
            "outcome",
        ]


class JobHostSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    market = serializers.CharField()
    status = serializers.CharField()
    availability_zone = serializers.CharField()
    cost_so_far = serializers.DecimalField(**MONEY)


class JobSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    owner = serializers.CharField(source="owner.username")
    instance_type = serializers.CharField(source="order.instance_type.name")
    image = serializers.CharField(source="order.image.name")
    order = serializers.UUIDField(source="order_id")
    host = serializers.UUIDField(source="host_id", allow_null=True, help_text="The current host")
    checkpoint_uri = serializers.CharField(source="order.checkpoint_uri")
    hosts = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField(help_text="Dollars, the sum of its hosts' costs")
    runs = JobRunSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "project",
            "owner",
            "status",
            "status_reason",
            "status_changed_at",
            "instance_type",
            "image",
            "market",
            "command",
            "env",
            "time_limit_minutes",
            "max_recoveries",
            "max_restarts",
            "retry_exit_codes",
            "stop_signal",
            "grace_seconds",
            "keep_host_minutes",
            "keep_host_until",
            "recoveries",
            "restarts",
            "exit_code",
            "order",
            "host",
            "checkpoint_uri",
            "started_at",
            "ended_at",
            "created_at",
            "log_bytes",
            "log_capped",
            "rerun_of",
            "hosts",
            "cost",
            "runs",
            "events",
        ]
        read_only_fields = fields

    def _costs(self) -> dict:
        if "costs" not in self.context:
            jobs = self.parent.instance if self.parent is not None else [self.instance]
            hosts = [host for job in jobs for host in job.order.instances.all()]
            self.context["costs"] = costs_so_far(hosts, now=timezone.now()) if hosts else {}
        return self.context["costs"]

    @extend_schema(responses=JobHostSerializer(many=True))
    def get_hosts(self, job: Job) -> list[dict]:
        """Every host the job ran on or waits for, oldest first, with what each has cost."""
        costs = self._costs()
        hosts = sorted(job.order.instances.all(), key=lambda h: (h.created_at, str(h.pk)))
        return JobHostSerializer(
            [
                {
                    "id": host.pk,
                    "name": host.name,
                    "market": host.market,
                    "status": host.status,
                    "availability_zone": host.availability_zone,
                    "cost_so_far": costs.get(host.pk, 0),
                }
                for host in hosts
            ],
            many=True,
        ).data

    @extend_schema_field(serializers.DecimalField(**MONEY))
    def get_cost(self, job: Job):
        costs = self._costs()
        return serializers.DecimalField(**MONEY).to_representation(
            sum((costs.get(host.pk, 0) for host in job.order.instances.all()), start=0)
        )


class LogQuerySerializer(StrictSerializer):
    offset = serializers.IntegerField(min_value=0, required=False, default=0)
    limit = serializers.IntegerField(
        min_value=1, max_value=1024 * 1024, required=False, default=256 * 1024
    )


class LogSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="UTF-8; bytes that are not are shown as U+FFFD")
    offset = serializers.IntegerField(help_text="The byte offset this text starts at")
    next_offset = serializers.IntegerField(help_text="Ask again from here for more")
    size = serializers.IntegerField(help_text="Bytes of log the portal holds")
    capped = serializers.BooleanField(help_text="The portal stopped keeping output at its cap")
    ended = serializers.BooleanField(help_text="The job has ended: no more output will come")


class JobViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Managed jobs of the caller's projects; POST submits one (admitted as an order of one
    host is: quota, budget, approval policy)."""

    serializer_class = JobSerializer
    filterset_fields = ["status", "market"]

    def get_queryset(self):
        return (
            Job.objects.for_user(self.request.user)
            .select_related("project", "owner", "order__instance_type", "order__image")
            .prefetch_related("runs", "events", "order__instances__events")
        )

    @extend_schema(request=JobCreateSerializer, responses={201: JobSerializer})
    def create(self, request, *args, **kwargs):
        incoming = JobCreateSerializer(data=request.data, context={"request": request})
        incoming.is_valid(raise_exception=True)
        job = job_submit(requester=request.user, **incoming.validated_data)
        audit_set_object(request, f"job:{job.pk}")
        body = JobSerializer(self.get_queryset().get(pk=job.pk)).data
        return Response(
            body, status=status.HTTP_201_CREATED, headers={"Location": f"/api/v1/jobs/{job.pk}/"}
        )

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a job that has not ended: its hosts end and its command is stopped (403 for
        who may only read it, 409 once it has ended)."""
        job = self.get_object()
        refuse_body(request)
        job_cancel(job=job, user=request.user)
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(request=None, responses={201: JobSerializer})
    @action(detail=True, methods=["post"])
    def rerun(self, request, pk=None):
        """A new job with this one's settings (409 while this one has not ended)."""
        job = self.get_object()
        refuse_body(request)
        new = job_rerun(job=job, user=request.user)
        audit_set_object(request, f"job:{new.pk}")
        return Response(
            JobSerializer(self.get_queryset().get(pk=new.pk)).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": f"/api/v1/jobs/{new.pk}/"},
        )

    @extend_schema(responses={200: {"type": "object", "additionalProperties": {"type": "array"}}})
    @action(detail=True, methods=["get"])
    def scalars(self, request, pk=None):
        """Its TensorBoard scalars, tag by tag: [[step, value], ...] (at most 500 a tag)."""
        return Response(job_scalar_series(self.get_object()))

    @extend_schema(parameters=[LogQuerySerializer], responses=LogSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """The job's output from byte ``offset`` (at most ``limit`` bytes): every run one after
        the other, each opened by a line saying where it ran. Poll with ``next_offset``."""
        job = self.get_object()
        query = LogQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        piece = job_log_read(job, **query.validated_data)
        return Response(LogSerializer(piece.as_dict()).data)


# --- the host agent's side -------------------------------------------------------------------


class AssignmentSerializer(serializers.Serializer):
    job = serializers.UUIDField()
    run = serializers.IntegerField()
    command = serializers.CharField()
    env = serializers.DictField(child=serializers.CharField())
    stop_signal = serializers.CharField()
    grace_seconds = serializers.IntegerField()
    stop = serializers.BooleanField(help_text="Stop the command (signal, grace, kill) now")


class RunRefSerializer(StrictSerializer):
    job = serializers.UUIDField()
    run = serializers.IntegerField(min_value=1)


class StartedSerializer(RunRefSerializer):
    pid = serializers.IntegerField(min_value=1)


BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


@extend_schema_field({"type": "string", "format": "byte", "pattern": BASE64})
class Base64Field(serializers.CharField):
    """Bytes sent as base64 (the schema says ``format: byte`` and its pattern)."""

    def to_internal_value(self, data) -> bytes:
        text = super().to_internal_value(data)
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("This is not base64.", code="invalid") from None


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
