"""instances/api/orders.py: orders in the API. /api/v1/orders/ (list, place with an
Idempotency-Key, approve, reject, cancel) and /api/v1/orders/estimate/."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Prefetch
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from instances import services
from instances.api.fields import MONEY, ProjectOfCaller
from instances.api.hosts import InstanceSerializer
from instances.lib.sshkeys import validate_public_key
from instances.models import (
    Image,
    Instance,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
    Placement,
)
from instances.selectors.clusters import cluster_members, order_size_bounds
from instances.selectors.costs import costs_so_far
from instances.selectors.mig import mig_order_refusals
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import NUL_MESSAGE, LookupField, StrictSerializer, has_nul
from portal.models import Project


class OrderBounds(StrictSerializer):
    """An order's count and lease, bounded by settings (read when a request, or the schema,
    needs them): an order and its estimate take the same values."""

    count = serializers.IntegerField(default=1)
    lease_hours = serializers.IntegerField(required=False)

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


class OrderCreateSerializer(OrderBounds):
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
    placement = serializers.ChoiceField(
        choices=Placement.choices,
        default=Placement.INDEPENDENT,
        help_text="cluster: nodes hosts launched together, all or none, in one placement group "
        "and zone, each with its rank and TF_CONFIG",
    )
    nodes = serializers.IntegerField(
        required=False, help_text="A cluster's node count (placement cluster only)"
    )
    efa = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A cluster's nodes get the type's EFA interfaces; default: when the type has "
        "EFA. true on a type without EFA is refused.",
    )
    mig_profile = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=16,
        help_text='count slices of this MIG profile (e.g. "1g.10gb") of the type\'s GPUs rather '
        "than whole hosts; see /api/v1/mig-profiles/",
    )

    def validate_ssh_public_key(self, value: str) -> str:
        # Checked here too so that a bad key is reported with the other field problems.
        validate_public_key(value)
        return value

    def validate(self, attrs: dict) -> dict:
        # A cluster's size is its nodes (its own bounds: instances/selectors/clusters.py);
        # separate hosts' is count. The service sees one count either way.
        nodes = attrs.pop("nodes", None)
        if attrs.get("placement") == Placement.CLUSTER:
            if "count" in self.initial_data:
                raise serializers.ValidationError(
                    {"count": ["A cluster's size is nodes; leave count out."]}, code="cluster_count"
                )
            if nodes is None:
                most = settings.PORTAL_CLUSTER_MAX_NODES
                raise serializers.ValidationError(
                    {"nodes": [f"A cluster needs nodes: 2 to {most}."]}, code="required"
                )
            attrs["count"] = nodes
        elif nodes is not None:
            raise serializers.ValidationError(
                {"nodes": ["nodes is a cluster's size: send placement cluster, or count alone."]},
                code="cluster_only",
            )
        return attrs


# An estimate multiplies a rate by hosts and hours: more digits than one rate.
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


class OrderListSerializer(serializers.ListSerializer):
    """A page of orders: every host on the page is costed at once, and every cluster's nodes
    read at once (a fixed number of queries for any number of orders, as a page of hosts is
    costed), not once per order."""

    def to_representation(self, data):
        orders = list(data.all() if hasattr(data, "all") else data)
        context = self.context
        hosts = [host for order in orders for host in order.instances.all()]
        if hosts and "costs_so_far" not in context:
            now = context.setdefault("now", timezone.now())
            context["costs_so_far"] = costs_so_far(hosts, now=now)
        if "cluster_members" not in context:
            context["cluster_members"] = cluster_members(o.pk for o in orders if o.is_cluster)
        return super().to_representation(orders)


class OrderPoolSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


class OrderSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    pool = OrderPoolSerializer(
        read_only=True,
        allow_null=True,
        help_text="The pool whose size this order asks for (approving it lets the pool grow to "
        "count hosts; none launch at once); null for an order of hosts",
    )
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
    nodes = serializers.SerializerMethodField(help_text="A cluster's node count; null otherwise")
    mig_profile = serializers.CharField(
        source="mig_profile.name",
        default=None,
        allow_null=True,
        help_text="The MIG profile of an order of slices; null for whole hosts",
    )
    cost_so_far = serializers.SerializerMethodField(
        help_text="What the order's hosts (a cluster's nodes) have cost so far, together"
    )
    instances = InstanceSerializer(many=True, read_only=True)

    class Meta:
        model = Order
        list_serializer_class = OrderListSerializer
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
            "pool",
            "placement",
            "nodes",
            "efa",
            "mig_profile",
            "lease_hours",
            "region",
            "ssh_key_fingerprint",
            "max_spot_price",
            "interruption_policy",
            "quoted_price_per_hour",
            "estimate",
            "cost_so_far",
            "created_at",
            "instances",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.DecimalField(**MONEY))
    def get_cost_so_far(self, obj: Order) -> str:
        hosts = list(obj.instances.all())
        costs = self.context.get("costs_so_far", {})
        if any(host.pk not in costs for host in hosts):
            now = self.context.setdefault("now", timezone.now())
            # Kept for the order's hosts below, which are costed from the same figures.
            costs = self.context["costs_so_far"] = costs | costs_so_far(hosts, now=now)
        return f"{sum((costs[host.pk] for host in hosts), Decimal(0)):.6f}"

    def get_nodes(self, obj: Order) -> int | None:
        return obj.count if obj.is_cluster else None

    @extend_schema(responses=EstimateSerializer)
    def get_estimate(self, obj: Order) -> dict:
        """What the order costs at the price quoted when it was placed."""
        return EstimateSerializer(services.order_quoted_estimate(obj)).data


class DecisionSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class RejectionSerializer(StrictSerializer):
    """What a rejection takes (documentation: the service says the same when it is missing)."""

    reason = serializers.CharField(max_length=500, help_text="Why; the requester reads it")


class EstimateQuerySerializer(OrderBounds):
    instance_type = LookupField(
        slug_field="name",
        queryset=InstanceType.objects.offered(),
        error_messages={"does_not_exist": "{value} is not in the catalog."},
    )
    market = serializers.ChoiceField(choices=Market.choices, default=Market.ON_DEMAND)
    lease_hours = serializers.IntegerField(default=lambda: settings.PORTAL_LEASE_DEFAULT_HOURS)
    placement = serializers.ChoiceField(
        choices=Placement.choices,
        default=Placement.INDEPENDENT,
        help_text="cluster: count is the cluster's nodes (2 to PORTAL_CLUSTER_MAX_NODES)",
    )
    mig_profile = serializers.CharField(
        required=False,
        max_length=16,
        help_text="count slices of this MIG profile of the type's GPUs",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A cluster's nodes may be more than an order's separate hosts: the bound is the
        # placement's, checked in validate().
        field = self.fields["count"]
        field.max_value = None
        field.validators = [v for v in field.validators if not isinstance(v, MaxValueValidator)]

    def validate(self, attrs: dict) -> dict:
        placement = attrs.pop("placement")
        least, most = order_size_bounds(placement)
        if not least <= attrs["count"] <= most:
            raise serializers.ValidationError(
                {"count": [f"count must be between {least} and {most}."]}, code="out_of_range"
            )
        name = attrs.pop("mig_profile", "")
        if name:
            problems = {}
            offered = mig_order_refusals(
                instance_type=attrs["instance_type"],
                name=name,
                placement=placement,
                market=attrs["market"],
                interruption_policy="",
                refuse=lambda field, message, code, **_: problems.setdefault(field, [message]),
            )
            if problems:
                raise serializers.ValidationError(problems, code="mig_profile_not_offered")
            attrs["mig_profile"] = offered.profile
        return attrs


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
            .select_related(
                "project",
                "requester",
                "instance_type",
                "image",
                "decided_by",
                "mig_profile",
                "pool",
            )
            .prefetch_related(
                Prefetch(
                    "instances",
                    queryset=Instance.objects.with_detail().with_events(),
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

    @extend_schema(request=DecisionSerializer, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel an order waiting for approval (its requester, a manager of the project or an
        admin); an order already decided answers 409."""
        order = self.get_object()
        if not permissions.can_cancel_order(request.user, order):
            raise Forbidden("Only the requester, a manager of the project or an admin cancels it.")
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        order = services.order_cancel(
            order=order, user=request.user, reason=body.validated_data["reason"]
        )
        return Response(OrderSerializer(self.get_queryset().get(pk=order.pk)).data)

    @extend_schema(parameters=[EstimateQuerySerializer], responses=EstimateSerializer)
    @action(detail=False, methods=["get"])
    def estimate(self, request):
        """What an order would cost per hour, per day and over its lease."""
        query = EstimateQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        estimate = services.order_estimate(**query.validated_data)
        return Response(EstimateSerializer(estimate).data)
