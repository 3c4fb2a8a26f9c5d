"""The pools API: /api/v1/pools/ (list, create), /api/v1/pools/{id}/ (read with its latest
events, PATCH sizes or mix, DELETE), its schedules and its events. Field names follow EC2
Auto Scaling where one exists (min_size, desired, max_size, on_demand_base, spot_percent)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db.models import Count, Q
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from instances import services
from instances.api.fields import ProjectOfCaller
from instances.lib.sshkeys import validate_public_key
from instances.models import (
    Image,
    Instance,
    InstanceType,
    InterruptionPolicy,
    Market,
    Pool,
    PoolEvent,
    PoolSchedule,
)
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import LookupField, StrictSerializer
from portal.models import Project

S = Instance.Status
LATEST_EVENTS = 20
SIZE = {"min_value": 0, "max_value": 10_000}


class PoolEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = PoolEvent
        fields = ["at", "kind", "message", "old_desired", "new_desired", "actor"]


class ScheduleSerializer(serializers.ModelSerializer):
    description = serializers.SerializerMethodField(help_text="The schedule in plain words")
    next_runs = serializers.SerializerMethodField(help_text="The next three runs, UTC")

    class Meta:
        model = PoolSchedule
        fields = [
            "id",
            "cron",
            "timezone",
            "min_size",
            "max_size",
            "desired",
            "enabled",
            "description",
            "next_runs",
            "last_run_at",
            "created_at",
        ]

    def get_description(self, obj: PoolSchedule) -> str:
        return services.schedule_words(obj)

    def get_next_runs(self, obj: PoolSchedule) -> list[str]:
        return [moment.isoformat() for moment in services.schedule_next_runs(obj)]


class ScheduleWriteSerializer(StrictSerializer):
    cron = serializers.CharField(max_length=100, help_text="Five fields, e.g. '0 9 * * 1-5'")
    timezone = serializers.CharField(max_length=64, default="UTC", help_text="IANA zone")
    min_size = serializers.IntegerField(required=False, allow_null=True, **SIZE)
    max_size = serializers.IntegerField(required=False, allow_null=True, **SIZE)
    desired = serializers.IntegerField(required=False, allow_null=True, **SIZE)
    enabled = serializers.BooleanField(default=True)


class PoolSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    instance_type = serializers.SlugRelatedField(slug_field="name", read_only=True)
    image = serializers.SlugRelatedField(slug_field="name", read_only=True)
    running_on_demand = serializers.IntegerField(read_only=True)
    running_spot = serializers.IntegerField(read_only=True)
    pending = serializers.IntegerField(read_only=True)
    blocked_markets = serializers.ListField(
        child=serializers.ChoiceField(choices=Market.choices),
        read_only=True,
        help_text="The markets whose launches wait until blocked_until (the other still launches)",
    )

    class Meta:
        model = Pool
        fields = [
            "id",
            "project",
            "name",
            "status",
            "status_reason",
            "created_by",
            "instance_type",
            "fallback_instance_types",
            "image",
            "ssh_key_fingerprint",
            "min_size",
            "desired",
            "max_size",
            "approved_max",
            "on_demand_base",
            "spot_percent",
            "interruption_policy",
            "target_gpu_utilization",
            "scale_out_minutes",
            "scale_in_minutes",
            "cooldown_minutes",
            "warmup_minutes",
            "running_on_demand",
            "running_spot",
            "pending",
            "refusal_reason",
            "blocked_until",
            "blocked_markets",
            "created_at",
        ]
        read_only_fields = fields


class PoolDetailSerializer(PoolSerializer):
    schedules = ScheduleSerializer(many=True, read_only=True)
    events = serializers.SerializerMethodField(help_text=f"The latest {LATEST_EVENTS} events")

    class Meta(PoolSerializer.Meta):
        fields = [*PoolSerializer.Meta.fields, "schedules", "events"]
        read_only_fields = fields

    def get_events(self, obj: Pool) -> list[dict]:
        rows = obj.events.order_by("-at", "-id")[:LATEST_EVENTS]
        return PoolEventSerializer(rows, many=True).data


class PoolTuning(StrictSerializer):
    """What PATCH may change (and create may set). Sizes are bounded by PORTAL_POOL_MAX_SIZE,
    read when a request (or the schema) needs it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        top = settings.PORTAL_POOL_MAX_SIZE
        for name in ("min_size", "desired", "max_size", "on_demand_base"):
            field = self.fields[name]
            field.max_value = top
            field.validators.append(
                MaxValueValidator(top, message=f"{name} must be at most {top}.")
            )

    min_size = serializers.IntegerField(required=False, **SIZE)
    desired = serializers.IntegerField(required=False, **SIZE)
    max_size = serializers.IntegerField(required=False, **SIZE)
    on_demand_base = serializers.IntegerField(required=False, **SIZE)
    spot_percent = serializers.IntegerField(required=False, min_value=0, max_value=100)
    interruption_policy = serializers.ChoiceField(
        choices=InterruptionPolicy.choices, required=False
    )
    target_gpu_utilization = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=100
    )
    scale_out_minutes = serializers.IntegerField(required=False, min_value=1, max_value=120)
    scale_in_minutes = serializers.IntegerField(required=False, min_value=1, max_value=1440)
    cooldown_minutes = serializers.IntegerField(required=False, min_value=0, max_value=1440)
    warmup_minutes = serializers.IntegerField(required=False, min_value=0, max_value=120)


class PoolCreateSerializer(PoolTuning):
    project = ProjectOfCaller(
        slug_field="slug",
        queryset=Project.objects.all(),
        error_messages={"does_not_exist": "You are not a member of a project called {value}."},
    )
    name = serializers.CharField(max_length=64)
    instance_type = LookupField(
        slug_field="name",
        queryset=InstanceType.objects.offered(),
        error_messages={
            "does_not_exist": "{value} is not in the catalog; see /api/v1/instance-types/."
        },
    )
    fallback_instance_types = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, max_length=8
    )
    image = LookupField(
        slug_field="name",
        queryset=Image.objects.filter(is_active=True),
        error_messages={"does_not_exist": "{value} is not an image; see /api/v1/images/."},
    )
    ssh_public_key = serializers.CharField(trim_whitespace=True)
    max_size = serializers.IntegerField(**SIZE)

    def validate_ssh_public_key(self, value: str) -> str:
        validate_public_key(value)
        return value


def _counted(queryset):
    """Each pool with its running (by market) and pending hosts, in the same query."""
    return queryset.annotate(
        running_on_demand=Count(
            "hosts", filter=Q(hosts__status=S.RUNNING, hosts__market="on_demand"), distinct=True
        ),
        running_spot=Count(
            "hosts", filter=Q(hosts__status=S.RUNNING, hosts__market="spot"), distinct=True
        ),
        pending=Count(
            "hosts",
            filter=Q(hosts__status__in=(S.REQUESTED, S.PROVISIONING, S.STARTING)),
            distinct=True,
        ),
    )


class PoolViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Pools of the caller's projects. Researchers create them in their projects (through the
    project's approval policy, as an order of max_size hosts); the creator, the project's
    managers and admins change and delete them."""

    filterset_fields = ["status"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_serializer_class(self):
        return PoolDetailSerializer if self.action == "retrieve" else PoolSerializer

    def get_queryset(self):
        rows = Pool.objects.for_user(self.request.user).exclude(status=Pool.Status.DELETED)
        rows = rows.select_related("project", "created_by", "instance_type", "image")
        if self.action == "retrieve":
            rows = rows.prefetch_related("schedules")
        return _counted(rows).order_by("project__slug", "name")

    def _answer(self, pool: Pool, code=status.HTTP_200_OK, detail: bool = True) -> Response:
        fresh = _counted(
            Pool.objects.filter(pk=pool.pk).select_related(
                "project", "created_by", "instance_type", "image"
            )
        ).get()
        serializer = PoolDetailSerializer if detail else PoolSerializer
        return Response(serializer(fresh).data, status=code)

    def _changeable(self) -> Pool:
        pool = self.get_object()
        if not permissions.can_change_pool(self.request.user, pool):
            raise Forbidden("Only the pool's creator, a manager of the project or an admin.")
        audit_set_object(self.request, f"pool:{pool.pk}")
        return pool

    @extend_schema(request=PoolCreateSerializer, responses={201: PoolDetailSerializer})
    def create(self, request, *args, **kwargs):
        incoming = PoolCreateSerializer(data=request.data, context={"request": request})
        incoming.is_valid(raise_exception=True)
        pool = services.pool_create(user=request.user, **incoming.validated_data)
        audit_set_object(request, f"pool:{pool.pk}")
        response = self._answer(pool, status.HTTP_201_CREATED)
        response["Location"] = f"/api/v1/pools/{pool.pk}/"
        return response

    @extend_schema(request=PoolTuning, responses=PoolDetailSerializer)
    def partial_update(self, request, pk=None):
        """Change sizes, the mix, the interruption policy or the target; raising max_size
        above what was approved asks the project's approval policy again."""
        pool = self._changeable()
        incoming = PoolTuning(data=request.data)
        incoming.is_valid(raise_exception=True)
        pool = services.pool_update(pool=pool, user=request.user, **incoming.validated_data)
        return self._answer(pool)

    @extend_schema(request=None, responses={202: PoolDetailSerializer})
    def destroy(self, request, pk=None):
        """End the pool: its hosts are terminated, then the pool is deleted."""
        pool = services.pool_delete(pool=self._changeable(), user=request.user)
        return self._answer(pool, status.HTTP_202_ACCEPTED)

    @extend_schema(responses=PoolEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """The pool's events, newest first: scaling moves and refusals with their reasons."""
        pool = self.get_object()
        page = self.paginate_queryset(pool.events.order_by("-at", "-id"))
        return self.get_paginated_response(PoolEventSerializer(page, many=True).data)

    @extend_schema(
        methods=["GET"], request=None, responses=ScheduleSerializer(many=True), filters=False
    )
    @extend_schema(
        methods=["POST"], request=ScheduleWriteSerializer, responses={201: ScheduleSerializer}
    )
    @action(detail=True, methods=["get", "post"], filterset_fields=[])
    def schedules(self, request, pk=None):
        """The pool's scheduled actions; POST adds one (cron, IANA time zone, and any of
        min_size, max_size, desired)."""
        if request.method == "GET":
            page = self.paginate_queryset(self.get_object().schedules.order_by("id"))
            return self.get_paginated_response(ScheduleSerializer(page, many=True).data)
        pool = self._changeable()
        incoming = ScheduleWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        schedule = services.schedule_create(pool=pool, user=request.user, **incoming.validated_data)
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)

    def _schedule(self, sid) -> PoolSchedule:
        schedule = self.get_object().schedules.filter(pk=sid).first()
        if schedule is None:
            raise Http404
        return schedule

    @extend_schema(methods=["GET"], request=None, responses=ScheduleSerializer, filters=False)
    @extend_schema(methods=["PATCH"], request=ScheduleWriteSerializer, responses=ScheduleSerializer)
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(
        detail=True,
        methods=["get", "patch", "delete"],
        url_path=r"schedules/(?P<sid>[0-9]{1,18})",
        url_name="schedule-detail",
        filterset_fields=[],
    )
    def schedule(self, request, pk=None, sid=None):
        """One scheduled action: read, change (PATCH any field) or remove it."""
        schedule = self._schedule(sid)
        if request.method == "GET":
            return Response(ScheduleSerializer(schedule).data)
        self._changeable()
        if request.method == "DELETE":
            services.schedule_delete(schedule=schedule, user=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        incoming = ScheduleWriteSerializer(data=request.data, partial=True)
        incoming.is_valid(raise_exception=True)
        schedule = services.schedule_update(
            schedule=schedule, user=request.user, **incoming.validated_data
        )
        return Response(ScheduleSerializer(schedule).data)
