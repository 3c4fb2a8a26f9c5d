"""portal's API for webhooks: ``/api/v1/webhooks/`` (register, list, change, delete, rotate the
secret), ``/api/v1/webhooks/{id}/deliveries/`` and a delivery's ``resend/``."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import LookupField, StrictSerializer, refuse_body
from portal.lib.webhooks import URL_MAX_LENGTH
from portal.models import Project, Webhook, WebhookAttempt, WebhookDelivery, WebhookEvent
from portal.services import (
    webhook_create,
    webhook_delete,
    webhook_resend,
    webhook_secret_rotate,
    webhook_update,
)
from portal.services.webhooks import DESCRIPTION_MAX


def _events(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.choices),
        min_length=1,
        max_length=len(WebhookEvent.values),
        help_text="The events to hear (finance: budget.threshold only).",
        **kwargs,
    )


class WebhookSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    events = serializers.ListField(child=serializers.CharField(), read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    secret_rotated_until = serializers.DateTimeField(
        source="previous_until",
        read_only=True,
        allow_null=True,
        help_text="Until when the secret before the last rotation still signs too.",
    )

    class Meta:
        model = Webhook
        fields = [
            "id",
            "project",
            "url",
            "events",
            "description",
            "is_active",
            "created_by",
            "created_at",
            "updated_at",
            "secret_rotated_until",
        ]
        read_only_fields = fields


class WebhookWithSecretSerializer(WebhookSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="The signing secret (whsec_...), shown this once: give it to the receiver's "
        "standardwebhooks verifier.",
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookCreateSerializer(StrictSerializer):
    project = LookupField(
        slug_field="slug",
        queryset=Project.objects.all(),
        error_messages={"does_not_exist": "There is no project called {value}."},
    )
    url = serializers.CharField(max_length=URL_MAX_LENGTH)
    events = _events()
    description = serializers.CharField(
        max_length=DESCRIPTION_MAX, required=False, allow_blank=True, default=""
    )


class WebhookChangeSerializer(StrictSerializer):
    url = serializers.CharField(max_length=URL_MAX_LENGTH, required=False)
    events = _events(required=False)
    description = serializers.CharField(
        max_length=DESCRIPTION_MAX, required=False, allow_blank=True
    )
    is_active = serializers.BooleanField(required=False)


class WebhookAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookAttempt
        fields = ["at", "response_status", "error", "milliseconds", "trigger"]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):
    attempts_made = WebhookAttemptSerializer(source="tries", many=True, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "message_id",
            "event",
            "status",
            "attempts",
            "next_attempt_at",
            "response_status",
            "last_error",
            "created_at",
            "delivered_at",
            "payload",
            "attempts_made",
        ]
        read_only_fields = fields


class WebhookViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Webhooks of the caller's projects: the project's managers and admins register any
    event, finance the budget ones. The answer to a create (and to rotate-secret) carries the
    signing secret once."""

    serializer_class = WebhookSerializer
    queryset = Webhook.objects.none()  # for the schema; requests use get_queryset()
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    filterset_fields: list[str] = []

    def get_queryset(self):
        return (
            permissions.visible_webhooks(self.request.user)
            .select_related("project", "created_by")
            .order_by("project__slug", "id")
        )

    def _mine(self) -> Webhook:
        webhook = self.get_object()
        audit_set_object(self.request, f"webhook:{webhook.pk}")
        return webhook

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookWithSecretSerializer})
    def create(self, request, *args, **kwargs):
        incoming = WebhookCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        project = incoming.validated_data["project"]
        if not permissions.can_see_project(request.user, project):
            # Another project's name is not confirmed to exist.
            raise serializers.ValidationError(
                {"project": [f"There is no project called {project.slug}."]}, code="does_not_exist"
            )
        webhook, secret = webhook_create(actor=request.user, **incoming.validated_data)
        audit_set_object(request, f"webhook:{webhook.pk}")
        body = WebhookWithSecretSerializer(webhook).data | {"secret": secret}
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Location"] = f"/api/v1/webhooks/{webhook.pk}/"
        return response

    @extend_schema(request=WebhookChangeSerializer, responses=WebhookSerializer)
    def partial_update(self, request, pk=None):
        """Change the URL, the events, the description or is_active; only what is sent."""
        webhook = self._mine()
        incoming = WebhookChangeSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        webhook = webhook_update(actor=request.user, webhook=webhook, **incoming.validated_data)
        return Response(WebhookSerializer(webhook).data)

    def destroy(self, request, pk=None):
        webhook_delete(actor=request.user, webhook=self._mine())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=WebhookWithSecretSerializer)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        """A new signing secret, shown once; the old one keeps signing beside it for
        PORTAL_WEBHOOK_SECRET_OVERLAP_HOURS (24 h)."""
        refuse_body(request)
        webhook, secret = webhook_secret_rotate(actor=request.user, webhook=self._mine())
        return Response(WebhookWithSecretSerializer(webhook).data | {"secret": secret})

    @extend_schema(request=None, responses=WebhookDeliverySerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], filterset_fields=[])
    def deliveries(self, request, pk=None):
        """The webhook's deliveries, newest first, each with its attempts."""
        rows = self.get_object().deliveries.prefetch_related("tries").order_by("-created_at", "-id")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)

    @extend_schema(request=None, responses={202: WebhookDeliverySerializer}, filters=False)
    @action(
        detail=True,
        methods=["post"],
        url_path=r"deliveries/(?P<delivery>[0-9]{1,18})/resend",
        url_name="delivery-resend",
        filterset_fields=[],
    )
    def resend(self, request, pk=None, delivery=None):
        """Send a delivery again now, with the same webhook-id and body."""
        refuse_body(request)
        webhook = self._mine()
        row = webhook.deliveries.filter(pk=delivery).first()
        if row is None:
            raise Http404
        if not permissions.can_manage_webhook(request.user, webhook):
            raise Forbidden(
                "Only the project's managers and admins resend this webhook's messages."
            )
        row = webhook_resend(actor=request.user, delivery=row)
        return Response(WebhookDeliverySerializer(row).data, status=status.HTTP_202_ACCEPTED)
