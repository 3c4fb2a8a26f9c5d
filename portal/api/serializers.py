"""Serializers of portal's API: projects, API tokens (quotas: instances.api.quotas)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.utils import timezone
from rest_framework import serializers

from portal.models import ApiToken, Membership, Project
from portal.rest import StrictSerializer


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]


class ProjectSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Project
        fields = ["slug", "name", "description", "is_active", "members"]


class TokenSerializer(serializers.ModelSerializer):
    state = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "state",
        ]
        read_only_fields = fields

    def get_state(self, obj: ApiToken) -> str:
        if obj.revoked_at:
            return "revoked"
        return "expired" if obj.expires_at <= timezone.now() else "active"


class TokenCreateSerializer(StrictSerializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(max_length=100, default="api")
    days = serializers.IntegerField(required=False, min_value=1, help_text="Default 30")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The longest life is a setting, read when a request (or the schema) needs it.
        days = self.fields["days"]
        days.max_value = settings.PORTAL_TOKEN_MAX_DAYS
        days.validators.append(
            MaxValueValidator(days.max_value, message=f"A token lives 1 to {days.max_value} days.")
        )


class TokenIssuedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown this once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
