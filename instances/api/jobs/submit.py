"""instances/api/jobs/submit.py: /api/v1/jobs/, the researcher's side of managed jobs: submit,
list, one job with its runs, hosts, recoveries and cost; its log from an offset, its scalars,
cancel, re-run."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from instances.api.fields import MONEY, Base64Field, ProjectOfCaller
from instances.models import (
    Image,
    InstanceType,
    Job,
    JobEvent,
    JobMarket,
    JobRun,
    Placement,
)
from instances.selectors.clusters import order_size_bounds
from instances.selectors.costs import costs_so_far
from instances.selectors.jobs import job_log_read, job_scalar_series
from instances.services.jobs import (
    job_bounds,
    job_cancel,
    job_rerun,
    job_submit,
)
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
    workdir_tarball = Base64Field(
        source="workdir",
        required=False,
        trim_whitespace=False,
        help_text="The working folder: a tar archive (gzipped or not), base64, unpacked where "
        "the command starts (at most PORTAL_JOB_WORKDIR_MAX_BYTES)",
    )
    workdir_git = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=2000,
        help_text="Or a git repository (https) the agent clones as the working folder",
    )
    workdir_ref = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=200,
        help_text="The branch, tag or commit of workdir_git (its default branch when empty)",
    )
    nodes = serializers.IntegerField(
        required=False,
        default=1,
        help_text="1: one host; 2 to PORTAL_CLUSTER_MAX_NODES: a cluster job, every run started "
        "on all nodes at once with TF_CONFIG (MultiWorkerMirroredStrategy)",
    )

    mig_profile = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=16,
        help_text='Run on one MIG slice of this profile (e.g. "1g.10gb") of the type\'s GPUs, '
        "on a shared host, instead of a whole host (on-demand, one node)",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The tops of the time limit and of nodes are settings, read when a request (or the
        # schema) needs them.
        for name, (low, high) in (
            ("time_limit_minutes", job_bounds("time_limit_minutes")),
            ("nodes", (1, order_size_bounds(Placement.CLUSTER)[1])),
        ):
            field = self.fields[name]
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
            "rank",
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
    rank = serializers.IntegerField(allow_null=True, help_text="A cluster job's node's rank")
    cost_so_far = serializers.DecimalField(**MONEY)


class JobSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    owner = serializers.CharField(source="owner.username")
    instance_type = serializers.CharField(source="order.instance_type.name")
    image = serializers.CharField(source="order.image.name")
    order = serializers.UUIDField(source="order_id")
    host = serializers.UUIDField(
        source="host_id", allow_null=True, help_text="The current host (a cluster's rank 0)"
    )
    nodes = serializers.IntegerField(read_only=True, help_text="Hosts each run takes")
    mig_profile = serializers.CharField(
        source="order.mig_profile.name",
        default=None,
        allow_null=True,
        help_text="The MIG slice profile it runs on; null on whole hosts",
    )
    checkpoint_uri = serializers.CharField(source="order.checkpoint_uri")
    hosts = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField(help_text="Dollars, the sum of its hosts' costs")
    runs = JobRunSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)
    workdir_tarball = serializers.SerializerMethodField(
        help_text="The uploaded working folder's size and SHA-256, or null"
    )

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
            "nodes",
            "mig_profile",
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
            "workdir_tarball",
            "workdir_git",
            "workdir_ref",
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

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {"size": {"type": "integer"}, "sha256": {"type": "string"}},
        }
    )
    def get_workdir_tarball(self, job: Job) -> dict | None:
        upload = getattr(job, "workdir", None)
        return {"size": upload.size, "sha256": upload.sha256} if upload else None

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
                    "rank": host.rank,
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
            .select_related("project", "owner", "order__instance_type", "order__image", "workdir")
            .defer("workdir__data")
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
