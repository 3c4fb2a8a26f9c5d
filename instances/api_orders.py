"""REST API for orders and instances: ``/api/v1/orders/`` and ``/api/v1/instances/``."""

from __future__ import annotations

from decimal import Decimal

import django_filters
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Prefetch
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from instances import services
from instances.models import (
    Image,
    Instance,
    InstanceEvent,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
)
from instances.sshkeys import validate_public_key
from instances.usage import cost_so_far, running_seconds
from portal.models import Project
from portal.rest import NUL_MESSAGE, LookupField, StrictSerializer, YesNoFilter, has_nul

MONEY = {"max_digits": 14, "decimal_places": 6}


class ProjectOfCaller(LookupField):
    """A project slug, looked up among the projects the caller may see."""

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            return Project.objects.none()
        return Project.objects.for_user(request.user)


class OrderCreateSerializer(StrictSerializer):
    project = ProjectOfCaller(
        slug_field="slug",
        queryset=Project.objects.all(),
        # The same answer for a project that does not exist and one the caller is not in:
        # project names are not for strangers to discover.
        error_messages={"does_not_exist": "You are not a member of a project called {value}."},
    )
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
    market = serializers.ChoiceField(choices=Market.choices)
    count = serializers.IntegerField(default=1)
    lease_hours = serializers.IntegerField(required=False)
    ssh_public_key = serializers.CharField(trim_whitespace=True)
    max_spot_price = serializers.DecimalField(
        **MONEY,
        required=False,
        allow_null=True,
        min_value=Decimal("0.000001"),
        error_messages={"min_value": "max_spot_price must be more than 0."},
    )
    interruption_policy = serializers.ChoiceField(
        choices=InterruptionPolicy.choices, required=False, allow_blank=True
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The limits are settings, read when a request (or the schema) needs them.
        for name, limit in (
            ("count", settings.PORTAL_ORDER_MAX_COUNT),
            ("lease_hours", settings.PORTAL_LEASE_MAX_HOURS),
        ):
            field = self.fields[name]
            field.min_value, field.max_value = 1, limit
            message = f"{name} must be between 1 and {limit}."
            field.validators += [
                MinValueValidator(1, message=message),
                MaxValueValidator(limit, message=message),
            ]

    def validate_ssh_public_key(self, value: str) -> str:
        # Checked here too so that a bad key is reported with the other field problems.
        validate_public_key(value)
        return value


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = InstanceEvent
        fields = ["old_status", "new_status", "reason", "at", "actor"]


class InstanceSerializer(serializers.ModelSerializer):
    order = serializers.UUIDField(source="order_id", read_only=True)
    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    instance_type = serializers.CharField(source="instance_type.name", read_only=True)
    gpu_model = serializers.CharField(source="instance_type.gpu_model", read_only=True)
    gpu_count = serializers.IntegerField(source="instance_type.gpu_count", read_only=True)
    image = serializers.CharField(source="image.name", read_only=True)
    ssh_command = serializers.SerializerMethodField()
    running_seconds = serializers.SerializerMethodField()
    cost_so_far = serializers.SerializerMethodField()

    class Meta:
        model = Instance
        fields = [
            "id",
            "order",
            "project",
            "owner",
            "instance_type",
            "gpu_model",
            "gpu_count",
            "image",
            "market",
            "region",
            "status",
            "status_reason",
            "status_changed_at",
            "cloud_id",
            "availability_zone",
            "public_ip",
            "private_ip",
            "launched_at",
            "lease_expires_at",
            "created_at",
            "ssh_command",
            "running_seconds",
            "cost_so_far",
        ]
        read_only_fields = fields

    def get_ssh_command(self, obj: Instance) -> str | None:
        return ssh_command(obj)

    def get_running_seconds(self, obj: Instance) -> int:
        return running_seconds(list(obj.events.all()), self.context.get("now") or timezone.now())

    @extend_schema(responses=serializers.DecimalField(**MONEY))
    def get_cost_so_far(self, obj: Instance) -> str:
        cost = cost_so_far(obj, list(obj.events.all()), self.context.get("now") or timezone.now())
        return f"{cost:.6f}"


class InstanceDetailSerializer(InstanceSerializer):
    events = EventSerializer(many=True, read_only=True)

    class Meta(InstanceSerializer.Meta):
        fields = [*InstanceSerializer.Meta.fields, "events"]
        read_only_fields = fields


def ssh_command(instance: Instance) -> str | None:
    if instance.status != Instance.Status.RUNNING or not instance.public_ip:
        return None
    return f"ssh {instance.image.ssh_user}@{instance.public_ip}"


# An estimate may price up to 1,000 hosts for a year: more digits than one order's money.
ESTIMATE_MONEY = {**MONEY, "max_digits": 20}


class EstimateSerializer(serializers.Serializer):
    price_per_host_hour = serializers.DecimalField(**MONEY)
    per_hour = serializers.DecimalField(**ESTIMATE_MONEY)
    per_day = serializers.DecimalField(**ESTIMATE_MONEY)
    per_lease = serializers.DecimalField(**ESTIMATE_MONEY)
    basis = serializers.CharField()


class SpotOnlyChoiceField(serializers.ChoiceField):
    """A spot order's choice; on-demand orders store "" and show null."""

    def to_representation(self, value):
        return None if value in ("", None) else super().to_representation(value)


class OrderSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    requester = serializers.CharField(source="requester.username")
    decided_by = serializers.CharField(source="decided_by.username", default=None, allow_null=True)
    interruption_policy = SpotOnlyChoiceField(
        choices=InterruptionPolicy.choices,
        allow_null=True,
        help_text="What happens when the cloud takes a spot host back; null on on-demand",
    )
    instance_type = serializers.CharField(source="instance_type.name")
    image = serializers.CharField(source="image.name")
    quoted_price_per_hour = serializers.DecimalField(**MONEY)
    max_spot_price = serializers.DecimalField(**MONEY, allow_null=True)
    estimate = serializers.SerializerMethodField()
    instances = InstanceSerializer(many=True, read_only=True)

    class Meta:
        model = Order
        fields = [
            "id",
            "status",
            "approval_reason",
            "decided_by",
            "decided_at",
            "decision_reason",
            "project",
            "requester",
            "instance_type",
            "image",
            "market",
            "count",
            "lease_hours",
            "region",
            "ssh_key_fingerprint",
            "max_spot_price",
            "interruption_policy",
            "quoted_price_per_hour",
            "estimate",
            "created_at",
            "instances",
        ]
        read_only_fields = fields

    @extend_schema(responses=EstimateSerializer)
    def get_estimate(self, obj: Order) -> dict:
        """What the order costs at the price quoted when it was placed."""
        per_hour = obj.quoted_price_per_hour * obj.count
        basis = "spot price when ordered" if obj.market == Market.SPOT else "on-demand list price"
        return EstimateSerializer(
            {
                "price_per_host_hour": obj.quoted_price_per_hour,
                "per_hour": per_hour,
                "per_day": per_hour * 24,
                "per_lease": per_hour * obj.lease_hours,
                "basis": basis,
            }
        ).data


class DecisionSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class RejectionSerializer(StrictSerializer):
    """What a rejection takes (documentation: the service says the same when it is missing)."""

    reason = serializers.CharField(max_length=500, help_text="Why; the requester reads it")


class EstimateQuerySerializer(StrictSerializer):
    instance_type = LookupField(
        slug_field="name",
        queryset=InstanceType.objects.offered(),
        error_messages={"does_not_exist": "{value} is not in the catalog."},
    )
    market = serializers.ChoiceField(choices=Market.choices, default=Market.ON_DEMAND)
    count = serializers.IntegerField(default=1, min_value=1, max_value=1000)
    lease_hours = serializers.IntegerField(default=24, min_value=1, max_value=24 * 366)


def events_prefetch() -> Prefetch:
    return Prefetch("events", queryset=InstanceEvent.objects.order_by("at", "id"))


@extend_schema_view(reject=extend_schema(request=RejectionSerializer))
class OrderViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Orders of the caller's projects; POST places one (send an Idempotency-Key to retry
    safely)."""

    serializer_class = OrderSerializer
    filterset_fields = ["market", "status"]

    def get_queryset(self):
        return (
            Order.objects.for_user(self.request.user)
            .select_related("project", "requester", "instance_type", "image", "decided_by")
            .prefetch_related(
                Prefetch(
                    "instances",
                    queryset=Instance.objects.select_related(
                        "project", "owner", "instance_type", "image", "order"
                    ).prefetch_related(events_prefetch()),
                )
            )
            .distinct()
        )

    @extend_schema(
        request=OrderCreateSerializer,
        responses={201: OrderSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                location=OpenApiParameter.HEADER,
                required=False,
                description="Same key and body again returns the first order; another body: 409.",
            )
        ],
    )
    def create(self, request, *args, **kwargs):
        incoming = OrderCreateSerializer(data=request.data, context={"request": request})
        incoming.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "").strip()
        if len(key) > 255:
            raise serializers.ValidationError(
                {"Idempotency-Key": ["The key is longer than 255 characters."]}
            )
        if has_nul(key):
            raise serializers.ValidationError(
                {"Idempotency-Key": [NUL_MESSAGE]}, code="null_characters_not_allowed"
            )
        order, created = services.order_submit(
            requester=request.user, idempotency_key=key or None, **incoming.validated_data
        )
        audit_set_object(request, f"order:{order.pk}")
        body = OrderSerializer(self.get_queryset().get(pk=order.pk)).data
        headers = {"Location": f"/api/v1/orders/{order.pk}/"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)

    def _decision(self, request) -> tuple[Order, str]:
        """The order (404 if unseen), then who may decide it (403), then the body (400)."""
        order = self.get_object()
        services.order_require_decider(order=order, user=request.user)
        decision = DecisionSerializer(data=request.data)
        decision.is_valid(raise_exception=True)
        return order, decision.validated_data["reason"]

    @extend_schema(request=DecisionSerializer, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve an order waiting for approval (admins and the project's managers)."""
        order, reason = self._decision(request)
        order = services.order_approve(order=order, user=request.user, reason=reason)
        return Response(OrderSerializer(self.get_queryset().get(pk=order.pk)).data)

    @extend_schema(request=DecisionSerializer, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject an order waiting for approval; the reason goes to the requester."""
        order, reason = self._decision(request)
        order = services.order_reject(order=order, user=request.user, reason=reason)
        return Response(OrderSerializer(self.get_queryset().get(pk=order.pk)).data)

    @extend_schema(parameters=[EstimateQuerySerializer], responses=EstimateSerializer)
    @action(detail=False, methods=["get"])
    def estimate(self, request):
        """What an order would cost per hour, per day and over its lease."""
        query = EstimateQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        estimate = services.order_estimate(**query.validated_data)
        return Response(EstimateSerializer(estimate).data)


class InstanceFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Instance.Status.choices)
    project = django_filters.CharFilter(field_name="project__slug")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    market = django_filters.ChoiceFilter(choices=Market.choices)
    mine = YesNoFilter(method="filter_mine", help_text="true: only my hosts")

    class Meta:
        model = Instance
        fields: list[str] = []

    def filter_mine(self, queryset, name: str, value: str):
        return queryset.filter(owner=self.request.user) if value in ("true", "1") else queryset


class InstanceViewSet(viewsets.ReadOnlyModelViewSet):
    """Hosts of the caller's projects, with stop, start and terminate."""

    filterset_class = InstanceFilter

    def get_serializer_class(self):
        return InstanceDetailSerializer if self.action == "retrieve" else InstanceSerializer

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    def get_queryset(self):
        return (
            Instance.objects.for_user(self.request.user)
            .select_related("project", "owner", "instance_type", "image", "order")
            .prefetch_related(events_prefetch())
            .distinct()
        )

    def _act(self, request, service):
        instance = service(instance=self.get_object(), user=request.user)
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(
            InstanceSerializer(fresh, context=self.get_serializer_context()).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._act(request, services.instance_request_stop)

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._act(request, services.instance_request_start)

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def terminate(self, request, pk=None):
        return self._act(request, services.instance_request_terminate)
