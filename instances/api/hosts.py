"""instances/api/hosts.py: hosts in the API. /api/v1/instances/ (filterable), one host with its
timeline, and what may be asked of hosts: stop, start, terminate, bulk actions, lease extension
and keep-running (instances/api/telemetry.py holds that one and the GPU readings)."""

from __future__ import annotations

import django_filters
from django.utils import timezone
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from instances import services
from instances.api.fields import MONEY
from instances.api.notebooks import NotebookActions
from instances.api.telemetry import KeepRunningActions
from instances.models import (
    ACTIONS,
    Instance,
    InstanceEvent,
    Market,
)
from instances.selectors.clusters import cluster_members, cluster_tf_config
from instances.selectors.costs import costs_so_far, running_seconds
from instances.selectors.hosts import instances_named
from instances.selectors.telemetry import latest_gpu_readings
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import StrictSerializer, YesNoFilter, refuse_body


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
    rank = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Its place in its cluster; null off clusters"
    )
    tf_config = serializers.SerializerMethodField(
        help_text="A cluster node's TF_CONFIG (every worker's address, this node's index); null "
        "off clusters and until every node of the cluster runs"
    )
    mig_profile = serializers.CharField(
        source="order.mig_profile.name",
        read_only=True,
        default=None,
        allow_null=True,
        help_text="A slice's MIG profile, or the profile a shared MIG host is split into; null "
        "for other hosts",
    )
    mig_device = serializers.CharField(
        source="held_slot.device_uuid",
        read_only=True,
        default=None,
        allow_null=True,
        help_text="A slice's MIG device (what CUDA_VISIBLE_DEVICES names); null for hosts",
    )
    shared_host = serializers.UUIDField(
        source="shared_host_id",
        read_only=True,
        default=None,
        allow_null=True,
        help_text="The shared MIG host a slice lives on; null for hosts",
    )

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
            "rank",
            "tf_config",
            "mig_profile",
            "mig_device",
            "shared_host",
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

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_tf_config(self, obj: Instance) -> dict | None:
        if obj.rank is None:
            return None
        return cluster_tf_config(obj, self._members(obj))

    def _members(self, obj: Instance) -> list[Instance]:
        # The clusters of a page of hosts are read at once (one query), as their costs are.
        members = self.context.setdefault("cluster_members", {})
        if obj.order_id not in members:
            members |= cluster_members(h.order_id for h in self._page(obj) if h.rank is not None)
        return members.get(obj.order_id, [])

    def _page(self, obj: Instance) -> list[Instance]:
        """The hosts serialized with ``obj`` (a page of the list), or ``obj`` alone."""
        batch = getattr(self.parent, "instance", None) if self.parent is not None else None
        return list(batch) if isinstance(batch, list) and obj in batch else [obj]

    @extend_schema(responses=serializers.DecimalField(**MONEY))
    def get_cost_so_far(self, obj: Instance) -> str:
        # A page of hosts is costed at once (a fixed number of queries, as metering bills).
        costs = self.context.get("costs_so_far", {})
        if obj.pk not in costs:
            now = self.context.get("now") or timezone.now()
            costs = costs_so_far(self._page(obj), now=now)
            self.context["costs_so_far"] = costs
        cost = costs[obj.pk]
        return f"{cost:.6f}"


class InstanceDetailSerializer(InstanceSerializer):
    events = EventSerializer(many=True, read_only=True)
    gpu_utilization = serializers.SerializerMethodField(
        help_text="GPU utilization in percent from the latest reading; null when there is no "
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


class ExtendSerializer(StrictSerializer):
    """A lease extension: up to the project's longest lease (counted from when the host first
    ran), if the budget admits the extra hours (409 otherwise, naming the limit)."""

    hours = serializers.IntegerField(min_value=1, help_text="Hours to add to the lease")


# Hosts one bulk action may name (a page of My hosts is 50).
BULK_ACTION_MAX = 100


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


class InstanceFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Instance.Status.choices)
    project = django_filters.CharFilter(field_name="project__slug")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    market = django_filters.ChoiceFilter(choices=Market.choices)
    mine = YesNoFilter(method="filter_mine", help_text="true: only my hosts")
    pool = django_filters.UUIDFilter(field_name="pool_id", help_text="only this pool's hosts")

    class Meta:
        model = Instance
        fields: list[str] = []

    def filter_mine(self, queryset, name: str, value: str):
        return queryset.filter(owner=self.request.user) if value in ("true", "1") else queryset


class InstanceViewSet(KeepRunningActions, NotebookActions, viewsets.ReadOnlyModelViewSet):
    """Hosts of the caller's projects, with stop, start, terminate, lease extension and
    keep-running."""

    filterset_class = InstanceFilter

    def get_serializer_class(self):
        return InstanceDetailSerializer if self.action == "retrieve" else InstanceSerializer

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    def get_queryset(self):
        return Instance.objects.for_user(self.request.user).with_detail().with_events().distinct()

    def _act(self, request, action: str):
        instance = self.get_object()
        refuse_body(request)
        instance = services.instance_request_action(
            instance=instance, user=request.user, action=action
        )
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(
            InstanceSerializer(fresh, context=self.get_serializer_context()).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._act(request, "stop")

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._act(request, "start")

    @extend_schema(request=None, responses={202: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def terminate(self, request, pk=None):
        return self._act(request, "terminate")

    @extend_schema(request=BulkActionSerializer, responses={202: BulkAnswerSerializer})
    @action(detail=False, methods=["post"])
    def bulk(self, request):
        """Stop, start or terminate many hosts at once, as My hosts' bulk actions do: 404 when
        one of them is not a host the caller sees, 403 (nothing asked) when one is not the
        caller's to change; a host whose state refuses is listed under ``refused`` with its
        code and sentence, and the others go ahead."""
        body = BulkActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        hosts = instances_named(request.user, body.validated_data["instances"])
        if hosts is None:
            raise NotFound("No such host: every id must be a host you can see.")
        done, refused = services.instances_request_action(
            instances=hosts, user=request.user, action=body.validated_data["action"]
        )
        fresh = self.get_queryset().filter(pk__in=[host.pk for host in done])
        answer = {
            "action": body.validated_data["action"],
            "requested": sorted(fresh, key=lambda host: host.name),
            "refused": [
                {"instance": host.pk, "name": host.name, "code": why.code, "detail": why.message}
                for host, why in refused
            ],
        }
        return Response(
            BulkAnswerSerializer(answer, context=self.get_serializer_context()).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(request=ExtendSerializer, responses={200: InstanceSerializer})
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        """Add hours to the host's lease: up to the project's longest lease counted from when it
        first ran, and only if the budget check admits the extra hours as it would an order;
        otherwise 409 (``lease_limit`` or ``budget_exceeded``) saying which limit."""
        instance = self.get_object()
        if not permissions.can_act_on_host(request.user, instance):
            raise Forbidden("You can see this host but not extend its lease; ask its owner.")
        body = ExtendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.instance_extend_lease(
            instance=instance, user=request.user, hours=body.validated_data["hours"]
        )
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(InstanceSerializer(fresh, context=self.get_serializer_context()).data)
