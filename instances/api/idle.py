"""A project's idle stop in the API: GET by anyone who sees the project, PUT by its managers
and admins (portal.permissions.can_set_idle_policy)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from instances.models import IdlePolicy
from instances.services.idle import IDLE_POLICY_FIELDS, idle_policy_set
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import StrictSerializer


class IdlePolicySerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    updated_by = serializers.CharField(
        source="updated_by.username", default=None, read_only=True, allow_null=True
    )
    updated_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="null: the project has no idle stop yet"
    )

    class Meta:
        model = IdlePolicy
        fields = ["project", *IDLE_POLICY_FIELDS, "updated_by", "updated_at"]
        read_only_fields = ["project", "updated_by", "updated_at"]


class IdlePolicyInputSerializer(StrictSerializer):
    enabled = serializers.BooleanField(required=False)
    threshold_percent = serializers.IntegerField(min_value=1, max_value=100, required=False)
    idle_minutes = serializers.IntegerField(min_value=2, max_value=10080, required=False)
    warning_minutes = serializers.IntegerField(min_value=1, max_value=10079, required=False)
    snooze_hours = serializers.IntegerField(min_value=1, max_value=168, required=False)


def policy_of(project) -> IdlePolicy:
    """The project's idle stop; an unsaved, disabled one when it has none."""
    return IdlePolicy.objects.filter(project=project).first() or IdlePolicy(
        project=project, enabled=False
    )


class IdlePolicyActions:
    """``/api/v1/projects/{slug}/idle-policy/``, an action of ProjectViewSet."""

    @extend_schema(
        methods=["GET"],
        responses=IdlePolicySerializer,
        description="When the project's idle hosts are stopped (enabled false: never).",
    )
    @extend_schema(
        methods=["PUT"], request=IdlePolicyInputSerializer, responses=IdlePolicySerializer
    )
    @action(detail=True, methods=["get", "put"], url_path="idle-policy")
    def idle_policy(self, request, slug=None):
        project = self.get_object()
        if request.method == "GET":
            return Response(IdlePolicySerializer(policy_of(project)).data)
        if not permissions.can_set_idle_policy(request.user, project):
            raise Forbidden("Only admins and the project's managers change its idle stop.")
        incoming = IdlePolicyInputSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            policy = idle_policy_set(project=project, actor=request.user, **incoming.validated_data)
        except ValidationError as error:
            raise serializers.ValidationError({"non_field_errors": error.messages}) from error
        return Response(IdlePolicySerializer(policy).data)
