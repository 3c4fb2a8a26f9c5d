"""A project's idle stop in the API: GET by anyone who sees the project, PUT by its managers
and admins (portal.permissions.can_set_idle_policy)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from instances.models import IdlePolicy
from instances.services.idle import IDLE_POLICY_BOUNDS, IDLE_POLICY_FIELDS, idle_policy_set
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


def _bounded(name: str) -> serializers.IntegerField:
    low, high = IDLE_POLICY_BOUNDS[name]
    return serializers.IntegerField(min_value=low, max_value=high, required=False)


class IdlePolicyInputSerializer(StrictSerializer):
    enabled = serializers.BooleanField(required=False)
    # The ranges are idle_policy_set's (IDLE_POLICY_BOUNDS); stated here for the schema.
    threshold_percent = _bounded("threshold_percent")
    idle_minutes = _bounded("idle_minutes")
    warning_minutes = _bounded("warning_minutes")
    snooze_hours = _bounded("snooze_hours")


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
        # A range idle_policy_set refuses is said at its field (portal.lib.rest's handler).
        policy = idle_policy_set(project=project, actor=request.user, **incoming.validated_data)
        return Response(IdlePolicySerializer(policy).data)
