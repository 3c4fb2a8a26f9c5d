"""The instances API: the catalog, images, orders (with approval) and hosts (with actions)."""

from __future__ import annotations

from django.db.models import Prefetch
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from audit.services import audit_set_object
from instances import services
from instances.api.filters import CatalogFilter, ImageFilter, InstanceFilter
from instances.api.serializers import (
    BulkActionSerializer,
    BulkAnswerSerializer,
    DecisionSerializer,
    EstimateQuerySerializer,
    EstimateSerializer,
    ExtendSerializer,
    ImageSerializer,
    InstanceDetailSerializer,
    InstanceSerializer,
    InstanceTypeSerializer,
    OrderCreateSerializer,
    OrderSerializer,
    RejectionSerializer,
)
from instances.api.telemetry import KeepRunningActions
from instances.models import (
    Image,
    Instance,
    InstanceType,
    Order,
)
from instances.selectors.hosts import hosts_named
from portal import permissions
from portal.errors import Forbidden
from portal.rest import NUL_MESSAGE, has_nul, refuse_body


class InstanceTypeViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU host catalog, filterable by GPU model, memory, count, price and spot."""

    serializer_class = InstanceTypeSerializer
    filterset_class = CatalogFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return InstanceType.objects.offered()


class ImageViewSet(viewsets.ReadOnlyModelViewSet):
    """TensorFlow images; ``?instance_type=`` lists the ones that run on that type's GPU."""

    serializer_class = ImageSerializer
    filterset_class = ImageFilter
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return Image.objects.filter(is_active=True)


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


class InstanceViewSet(KeepRunningActions, viewsets.ReadOnlyModelViewSet):
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
        hosts = hosts_named(request.user, body.validated_data["instances"])
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
