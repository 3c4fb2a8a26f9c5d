"""Serializers of the audit log's API."""

from __future__ import annotations

from rest_framework import serializers

from audit import status
from audit.models import AuditEvent
from audit.status import body_summary


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
