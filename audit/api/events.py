"""audit/api/events.py: the audit log in the API, ``GET /api/v1/audit/events/`` (admins only):
its serializers, its permission and its viewset. The filter is audit.selectors.filters, shared
with the pages."""

from __future__ import annotations

from rest_framework import permissions, serializers, viewsets

from audit.lib.access import reads_whole_log
from audit.models import AuditEvent
from audit.selectors import status
from audit.selectors.filters import AuditEventFilter
from audit.selectors.status import body_summary


class ActorSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="actor_id", allow_null=True)
    username = serializers.CharField(source="actor_username")
    role = serializers.CharField(source="actor_role")


class AuditEventSerializer(serializers.ModelSerializer):
    actor = ActorSerializer(source="*")
    object = serializers.CharField(source="object_ref")
    duration_ms = serializers.FloatField()
    body_summary = serializers.SerializerMethodField()
    chain_status = serializers.ChoiceField(
        source="chain.status",
        choices=status.CHOICES,
        read_only=True,
        help_text="sealed: in the signed hash chain; pending: not sealed yet (the next seal "
        "takes it); outside: a row audit_verify reports, e.g. one inserted by hand",
    )
    chain_note = serializers.CharField(
        source="chain.note",
        read_only=True,
        help_text="Why the row is outside the sealed chain; empty otherwise",
    )

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
            "chain_status",
            "chain_note",
        ]
        read_only_fields = fields

    def get_body_summary(self, event: AuditEvent) -> dict | list | None:
        return body_summary(event)


class IsPortalAdmin(permissions.BasePermission):
    """Only admins read the log; researchers and finance see their own on My activity."""

    message = "Only portal admins can read the audit log; your own activity is at /activity/."

    def has_permission(self, request, view):
        return reads_whole_log(request.user)


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log, newest first: one row per API call, unsafe page request, sign-in, admin
    action, and state change made by a task or command. Filter by actor, time, method,
    status, outcome, path and object."""

    serializer_class = AuditEventSerializer
    permission_classes = [permissions.IsAuthenticated, IsPortalAdmin]
    filterset_class = AuditEventFilter
    lookup_field = "seq"
    # A forged row may carry a number below 1; it can be read like any other.
    lookup_value_regex = r"-?[0-9]+"

    def get_queryset(self):
        return AuditEvent.objects.for_user(self.request.user).order_by("-seq")

    def paginate_queryset(self, queryset):
        # Where each row stands against the chain, for the whole page in a few queries.
        page = super().paginate_queryset(queryset)
        return status.annotate_chain(page) if page is not None else None

    def get_object(self):
        event = super().get_object()
        status.annotate_chain([event])
        return event
