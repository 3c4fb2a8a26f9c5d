"""What the instances API reads and writes: catalog, orders, hosts, estimates."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers

from instances import services
from instances.lib.sshkeys import validate_public_key
from instances.models import (
    ACTIONS,
    Image,
    Instance,
    InstanceEvent,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
)
from instances.selectors.costs import costs_so_far, running_seconds
from instances.selectors.telemetry import latest_gpu_readings
from portal.models import Project
from portal.rest import LookupField, StrictSerializer

READ_ONLY_MONEY = {"max_digits": 14, "decimal_places": 6, "read_only": True}
# Hosts one bulk action may name (a page of My hosts is 50).
BULK_ACTION_MAX = 100


class ImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = [
            "name",
            "tensorflow_version",
            "cuda_version",
            "cudnn_version",
            "nccl_version",
            "python_version",
            "min_driver_version",
            "gpu_architectures",
            "provider_image_ids",
        ]


class InstanceTypeSerializer(serializers.ModelSerializer):
    on_demand_price_per_hour = serializers.DecimalField(**READ_ONLY_MONEY)
    price_per_gpu_hour = serializers.DecimalField(**READ_ONLY_MONEY)
    spot_price_per_hour = serializers.DecimalField(**READ_ONLY_MONEY, allow_null=True)
    spot_price_per_gpu_hour = serializers.DecimalField(**READ_ONLY_MONEY, allow_null=True)
    network_gbps = serializers.DecimalField(max_digits=8, decimal_places=1, read_only=True)
    total_gpu_memory_gib = serializers.IntegerField(read_only=True)
    compatible_images = serializers.SerializerMethodField()
    spot_price_doubt = serializers.CharField(
        read_only=True,
        help_text="Why the spot price cannot be taken as true (under 1 % of on-demand, or not "
        "refreshed for a week); empty when it can",
    )

    class Meta:
        model = InstanceType
        fields = [
            "name",
            "provider",
            "gpu_model",
            "gpu_count",
            "gpu_memory_gib",
            "total_gpu_memory_gib",
            "gpu_architecture",
            "gpu_architecture_name",
            "mig_profiles",
            "vcpus",
            "memory_gib",
            "local_nvme_gb",
            "network_gbps",
            "network_burst",
            "efa",
            "regions",
            "on_demand_price_per_hour",
            "price_per_gpu_hour",
            "spot_offered",
            "spot_price_per_hour",
            "spot_price_per_gpu_hour",
            "spot_price_at",
            "spot_price_doubt",
            "price_source",
            "price_as_of",
            "compatible_images",
        ]

    def get_compatible_images(self, obj: InstanceType) -> list[str]:
        # The image table is small: load it once per response, not once per row (setdefault
        # would build its default, a query, on every call).
        images = self.context.get("_images")
        if images is None:
            images = self.context["_images"] = list(Image.objects.filter(is_active=True))
        return [image.name for image in obj.compatible_images(images)]


MONEY = {"max_digits": 14, "decimal_places": 6}


class ProjectOfCaller(LookupField):
    """A project slug, looked up among the projects the caller may see."""

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            return Project.objects.none()
        return Project.objects.for_user(request.user)


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

    def validate_ssh_public_key(self, value: str) -> str:
        # Checked here too so that a bad key is reported with the other field problems.
        validate_public_key(value)
        return value


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = InstanceEvent
        fields = ["old_status", "new_status", "reason", "at", "actor"]


class SpotRecoverySerializer(serializers.Serializer):
    """A spot host the cloud is taking back (services.spot_takeback: the page's words)."""

    state = serializers.CharField(help_text="warned")
    label = serializers.CharField()
    at = serializers.DateTimeField(help_text="When the cloud takes the host back")
    next = serializers.CharField(help_text="What happens next and why")


class InstanceSerializer(serializers.ModelSerializer):
    spot_recovery = serializers.SerializerMethodField(
        help_text="Null unless the cloud has warned that it takes this spot host back"
    )
    name = serializers.CharField(read_only=True, help_text="As pages and the cloud's tags name it")
    order = serializers.UUIDField(source="order_id", read_only=True)
    pool = serializers.UUIDField(
        source="pool_id", read_only=True, allow_null=True, help_text="The pool it serves, or null"
    )
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
            "name",
            "order",
            "pool",
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
            "lease_extended_hours",
            "created_at",
            "ssh_command",
            "running_seconds",
            "cost_so_far",
            "spot_recovery",
        ]
        read_only_fields = fields

    def get_ssh_command(self, obj: Instance) -> str | None:
        return obj.ssh_command

    @extend_schema_field(SpotRecoverySerializer(allow_null=True))
    def get_spot_recovery(self, obj: Instance) -> dict | None:
        takeback = services.spot_takeback(obj)
        return SpotRecoverySerializer(takeback.as_dict()).data if takeback else None

    def get_running_seconds(self, obj: Instance) -> int:
        return running_seconds(list(obj.events.all()), self.context.get("now") or timezone.now())

    @extend_schema(responses=serializers.DecimalField(**MONEY))
    def get_cost_so_far(self, obj: Instance) -> str:
        # A page of hosts is costed at once (a fixed number of queries, as metering bills).
        costs = self.context.get("costs_so_far", {})
        if obj.pk not in costs:
            batch = getattr(self.parent, "instance", None) if self.parent is not None else None
            hosts = list(batch) if isinstance(batch, list) and obj in batch else [obj]
            costs = costs_so_far(hosts, now=self.context.get("now") or timezone.now())
            self.context["costs_so_far"] = costs
        cost = costs[obj.pk]
        return f"{cost:.6f}"


class InstanceDetailSerializer(InstanceSerializer):
    events = EventSerializer(many=True, read_only=True)
    gpu_utilization = serializers.SerializerMethodField(
        help_text="GPU utilisation in percent from the latest reading; null when there is no "
        "recent one (see metrics/ for the series)"
    )
    # Spot recovery: where the order keeps checkpoints (every replacement gets the same), the
    # host this one replaces and the one that replaced it, and the cloud's warning.
    checkpoint_uri = serializers.CharField(source="order.checkpoint_uri", read_only=True)
    replaces = serializers.UUIDField(source="replaces_id", read_only=True, allow_null=True)
    replaced_by = serializers.SerializerMethodField()

    class Meta(InstanceSerializer.Meta):
        fields = [
            *InstanceSerializer.Meta.fields,
            "gpu_utilization",
            "idle_stop_at",
            "idle_snoozed_until",
            "checkpoint_uri",
            "replaces",
            "replaced_by",
            "spot_warning_at",
            "spot_interruption_at",
            "events",
        ]
        read_only_fields = fields

    def get_gpu_utilization(self, instance) -> int | None:
        now = self.context.get("now") or timezone.now()
        latest = latest_gpu_readings([instance.pk], now=now).get(instance.pk)
        return latest["utilization"] if latest else None

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_replaced_by(self, obj: Instance) -> str | None:
        replacement = obj.replaced_by
        return str(replacement.pk) if replacement is not None else None


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
    """A page of orders: every host on the page is costed at once (a fixed number of queries
    for any number of orders, as a page of hosts is costed), not once per order."""

    def to_representation(self, data):
        orders = list(data.all() if hasattr(data, "all") else data)
        context = self.context
        hosts = [host for order in orders for host in order.instances.all()]
        if hosts and "costs_so_far" not in context:
            now = context.setdefault("now", timezone.now())
            context["costs_so_far"] = costs_so_far(hosts, now=now)
        return super().to_representation(orders)


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
        return EstimateSerializer(services.order_quoted_estimate(obj)).data


class DecisionSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class ExtendSerializer(StrictSerializer):
    """A lease extension: up to the project's longest lease (counted from when the host first
    ran), if the budget admits the extra hours (409 otherwise, naming the limit)."""

    hours = serializers.IntegerField(min_value=1, help_text="Hours to add to the lease")


class BulkActionSerializer(StrictSerializer):
    """One action asked of many hosts at once, as My hosts' bulk stop and terminate ask it."""

    action = serializers.ChoiceField(
        choices=sorted(ACTIONS),
        help_text="What to ask of every host: " + ", ".join(sorted(ACTIONS)),
    )
    instances = serializers.ListField(
        child=serializers.UUIDField(),
        min_length=1,
        max_length=BULK_ACTION_MAX,
        help_text=f"The hosts' ids, 1 to {BULK_ACTION_MAX}",
    )


class BulkRefusalSerializer(serializers.Serializer):
    instance = serializers.UUIDField(help_text="The host's id")
    name = serializers.CharField()
    code = serializers.CharField(help_text="Why its state refuses, e.g. spot_cannot_stop")
    detail = serializers.CharField(help_text="The sentence My hosts shows")


class BulkAnswerSerializer(serializers.Serializer):
    """Hosts asked (each as GET /instances/{id}/ lists it) and hosts whose state refused."""

    action = serializers.CharField()
    requested = InstanceSerializer(many=True)
    refused = BulkRefusalSerializer(many=True)


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
