"""A project's approval policy in the API: GET by anyone who sees the project (what will hold
their orders), PUT by its managers and admins (portal.permissions.can_set_approval_policy),
through approval_policy_set, as the Quotas page and the project's approval policy page."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from instances.models import ApprovalPolicy, Quota
from instances.services.approvals import (
    APPROVAL_EXPIRY_MAX_DAYS,
    APPROVAL_POLICY_FIELDS,
    approval_policy_set,
)
from portal import permissions
from portal.lib.errors import Forbidden
from portal.lib.rest import StrictSerializer


class ApprovalPolicySerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    instance_types = serializers.ListField(child=serializers.CharField(), read_only=True)
    updated_by = serializers.CharField(
        source="updated_by.username", default=None, read_only=True, allow_null=True
    )
    updated_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="null: the project has no policy yet"
    )

    class Meta:
        model = ApprovalPolicy
        fields = ["project", *APPROVAL_POLICY_FIELDS, "updated_by", "updated_at"]
        read_only_fields = fields


class ApprovalPolicyInputSerializer(StrictSerializer):
    """What PUT takes; a field left out keeps its value."""

    gpus_above = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        allow_null=True,
        required=False,
        help_text="Orders for more GPUs than this wait for a yes; null: no GPU limit",
    )
    instance_types = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=Quota.MAX_NAMES,
        required=False,
        help_text="Orders for these catalog types always wait for a yes; repeats kept once",
    )
    on_demand_price_above = serializers.DecimalField(
        max_digits=14,
        decimal_places=6,
        min_value=0,
        allow_null=True,
        required=False,
        coerce_to_string=True,
        help_text="On-demand orders above this many dollars an hour (all hosts) wait",
    )
    expire_after_days = serializers.IntegerField(
        min_value=1,
        max_value=APPROVAL_EXPIRY_MAX_DAYS,
        required=False,
        help_text="A held order nobody decides expires after this many days",
    )


def approval_policy_of(project) -> ApprovalPolicy:
    """The project's approval policy; an unsaved one holding nothing when it has none."""
    return ApprovalPolicy.objects.filter(project=project).first() or ApprovalPolicy(project=project)


class ApprovalPolicyActions:
    """``/api/v1/projects/{slug}/approval-policy/``, an action of ProjectViewSet."""

    @extend_schema(
        methods=["GET"],
        responses=ApprovalPolicySerializer,
        description="Which of the project's orders wait for a manager's or an admin's yes.",
    )
    @extend_schema(
        methods=["PUT"],
        request=ApprovalPolicyInputSerializer,
        responses=ApprovalPolicySerializer,
        description="Managers of the project and admins; a field left out keeps its value.",
    )
    @action(detail=True, methods=["get", "put"], url_path="approval-policy")
    def approval_policy(self, request, slug=None):
        project = self.get_object()
        if request.method == "GET":
            return Response(ApprovalPolicySerializer(approval_policy_of(project)).data)
        if not permissions.can_set_approval_policy(request.user, project):
            raise Forbidden("Only admins and the project's managers change its approval policy.")
        incoming = ApprovalPolicyInputSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        policy = approval_policy_set(project=project, actor=request.user, **incoming.validated_data)
        return Response(ApprovalPolicySerializer(policy).data)
