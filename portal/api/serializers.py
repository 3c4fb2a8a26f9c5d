"""Serializers of portal's API: projects, quotas, API tokens."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.utils import timezone
from rest_framework import serializers

from portal import permissions
from portal.models import ApiToken, Membership, Project, Quota, QuotaChange, QuotaRequest, User
from portal.quotas import Usage, usage_of
from portal.rest import BoundedDictField, LookupField, StrictModelSerializer, StrictSerializer
from portal.services import QUOTA_REQUEST_GPUS_RULE, QUOTA_REQUEST_MOST_GPUS


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


class QuotaChangeSerializer(serializers.ModelSerializer):
    changed_by = serializers.CharField(source="changed_by.username", default=None)

    class Meta:
        model = QuotaChange
        fields = ["changed_by", "changed_at", "before", "after"]


class QuotaListSerializer(serializers.ListSerializer):
    """Counts what is in use for every quota of the page in one go, not one count per row."""

    def to_representation(self, data):
        rows = list(data.all() if hasattr(data, "all") else data)
        self.context.setdefault("_usage", {}).update(
            usage_of((quota.project_id, quota.user_id) for quota in rows)
        )
        return super().to_representation(rows)


class QuotaSerializer(StrictModelSerializer):
    project = LookupField(
        slug_field="slug",
        queryset=Project.objects.all(),
        error_messages={"does_not_exist": "{value} is not a project; see /api/v1/projects/."},
    )
    member = LookupField(
        error_messages={"does_not_exist": "{value} is not a user."},
        source="user",
        slug_field="username",
        queryset=User.objects.all(),
        required=False,
        allow_null=True,
    )
    # Bounded here too, so that the schema says so and an oversized body is refused before
    # any of it is looked at; quota_set checks the same for every caller.
    max_gpus_by_model = BoundedDictField(
        child=serializers.IntegerField(min_value=0), max_length=Quota.MAX_NAMES, required=False
    )
    allowed_instance_types = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=Quota.MAX_NAMES,
        required=False,
        help_text="Repeated names are kept once",
    )
    allowed_markets = BoundedDictField(
        child=serializers.ListField(
            child=serializers.ChoiceField(choices=Quota.MARKETS),
            min_length=1,
            max_length=len(Quota.MARKETS),
        ),
        max_length=Quota.MAX_NAMES,
        required=False,
    )
    in_use = serializers.SerializerMethodField()
    over_limit = serializers.SerializerMethodField()
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, default=None)
    changes = QuotaChangeSerializer(many=True, read_only=True)

    class Meta:
        model = Quota
        list_serializer_class = QuotaListSerializer
        fields = [
            "id",
            "project",
            "member",
            "max_gpus",
            "max_gpus_by_model",
            "max_instances",
            "max_lease_hours",
            "allowed_instance_types",
            "allowed_markets",
            "in_use",
            "over_limit",
            "updated_by",
            "updated_at",
            "changes",
        ]
        read_only_fields = ["id", "updated_at"]
        # One quota per project (and member) is kept by quota_set, which updates in place.
        validators: list = []

    def _usage(self, obj: Quota) -> Usage:
        cache = self.context.setdefault("_usage", {})
        key = (obj.project_id, obj.user_id)
        if key not in cache:
            cache.update(usage_of([key]))
        return cache[key]

    def get_in_use(self, obj: Quota) -> dict:
        used = self._usage(obj)
        return {
            "gpus": used.gpus,
            "instances": used.instances,
            "gpus_by_model": dict(used.gpus_by_model),
        }

    def get_over_limit(self, obj: Quota) -> bool:
        return obj.is_over(self._usage(obj))


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


class QuotaIncreaseSerializer(StrictModelSerializer):
    """A request for more of a project's quota; POST ``project``, ``gpus`` and ``reason``."""

    project = LookupField(
        slug_field="slug",
        queryset=Project.objects.all(),
        error_messages={"does_not_exist": "{value} is not a project; see /api/v1/projects/."},
    )
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", default=None, read_only=True, allow_null=True
    )
    gpus = serializers.IntegerField(
        min_value=1,
        max_value=QUOTA_REQUEST_MOST_GPUS,
        help_text="How many more GPUs",
        error_messages=dict.fromkeys(
            ("invalid", "min_value", "max_value"), QUOTA_REQUEST_GPUS_RULE
        ),
    )
    reason = serializers.CharField(max_length=2000, trim_whitespace=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "project",
            "requester",
            "gpus",
            "reason",
            "status",
            "created_at",
            "decided_by",
            "decided_at",
            "answer",
        ]
        read_only_fields = ["status", "created_at", "decided_at", "answer"]

    def validate_project(self, project: Project) -> Project:
        # The answer for a project the caller cannot see is the one for a project that does
        # not exist: project names are not for strangers to discover.
        request = self.context.get("request")
        if request is None or not permissions.can_see_project(request.user, project):
            raise serializers.ValidationError(
                f"You are not a member of a project called {project.slug}.", code="does_not_exist"
            )
        return project


class QuotaIncreaseDecisionSerializer(StrictSerializer):
    """An admin's answer to a request: ``grant`` (raises the GPU limit by what was asked) or
    ``decline``, with an optional sentence."""

    decision = serializers.ChoiceField(choices=["grant", "decline"])
    answer = serializers.CharField(max_length=500, required=False, allow_blank=True)
