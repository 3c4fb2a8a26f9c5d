"""REST API for the audit log: ``GET /api/v1/audit/events/`` (admins only)."""

from __future__ import annotations

import json

from rest_framework import permissions, serializers, viewsets

from audit.filters import AuditEventFilter
from audit.models import AuditEvent


class IsPortalAdmin(permissions.BasePermission):
    """Only admins read the log; researchers and finance see their own on My activity."""

    message = "Only portal admins can read the audit log; your own activity is at /activity/."

    def has_permission(self, request, view):
        return bool(getattr(request.user, "is_portal_admin", False))


class ActorSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="actor_id", allow_null=True)
    username = serializers.CharField(source="actor_username")
    role = serializers.CharField(source="actor_role")


class AuditEventSerializer(serializers.ModelSerializer):
    actor = ActorSerializer(source="*")
    object = serializers.CharField(source="object_ref")
    duration_ms = serializers.FloatField()
    body_summary = serializers.SerializerMethodField()

    class Meta:
        model = AuditEvent
        fields = [
            "seq",
            "time",
            "request_id",
            "actor",
            "auth_method",
            "source_ip",
            "user_agent",
            "method",
            "route",
            "view_name",
            "path",
            "query",
            "status",
            "outcome",
            "duration_ms",
            "object",
            "action",
            "error",
            "body_bytes",
            "body_digest",
            "body_summary",
            "app_version",
        ]
        read_only_fields = fields

    def get_body_summary(self, event: AuditEvent) -> dict | list | None:
        return json.loads(event.body_summary) if event.body_summary else None


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log, newest first: one row per API call, unsafe page request, sign-in, admin
    action, and state change made by a task or command. Filter by actor, time, method,
    status, outcome, path and object."""

    serializer_class = AuditEventSerializer
    permission_classes = [permissions.IsAuthenticated, IsPortalAdmin]
    filterset_class = AuditEventFilter
    lookup_field = "seq"
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self):
        return AuditEvent.objects.for_user(self.request.user).order_by("-seq")
