"""Views of the audit log's API: ``GET /api/v1/audit/events/`` (admins only)."""

from __future__ import annotations

from rest_framework import permissions, viewsets

from audit import status
from audit.api.serializers import AuditEventSerializer
from audit.filters import AuditEventFilter
from audit.lib.access import reads_whole_log
from audit.models import AuditEvent


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
