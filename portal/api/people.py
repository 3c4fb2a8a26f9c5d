"""portal's API for projects: ``/api/v1/projects/``, each with its members (the API serves
instances.api.quotas.ProjectViewSet, which adds the quota, idle stop and approval policy)."""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal import permissions, services
from portal.lib import isolation
from portal.lib.errors import Forbidden
from portal.lib.rest import StrictSerializer, YesNoFilter
from portal.models import Membership, Project, ProjectChange


class ProjectFilter(django_filters.FilterSet):
    is_active = YesNoFilter(help_text="true: open projects; false: closed ones")

    class Meta:
        model = Project
        fields: list[str] = []


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]


class IsolationSerializer(serializers.Serializer):
    subnet_ids = serializers.ListField(child=serializers.CharField())
    security_group_ids = serializers.ListField(child=serializers.CharField())
    kms_key_id = serializers.CharField()
    tenancy = serializers.CharField()
    host_id = serializers.CharField()
    instance_profile = serializers.CharField()


class ProjectSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)
    launches_with = serializers.SerializerMethodField(
        help_text="What the project's hosts launch with: its own fields, else the portal's "
        "defaults (PORTAL_EC2_*)."
    )

    class Meta:
        model = Project
        fields = [
            "slug",
            "name",
            "description",
            "is_active",
            "members",
            *Project.ISOLATION_FIELDS,
            "launches_with",
        ]

    @extend_schema_field(IsolationSerializer)
    def get_launches_with(self, project: Project) -> dict:
        return project.isolation_in_effect()


def _ids(what: str, shape: str) -> serializers.ListField:
    shaped = extend_schema_field(
        {
            "type": "array",
            "items": {"type": "string", "pattern": shape},
            "maxItems": isolation.MAX_IDS,
            "uniqueItems": True,
        }
    )(type("IdsField", (serializers.ListField,), {}))
    return shaped(
        child=serializers.CharField(max_length=64),
        max_length=isolation.MAX_IDS,
        required=False,
        help_text=f"{what} ids; [] for the portal's default.",
    )


def _text(shape: str, max_length: int, help_text: str) -> serializers.CharField:
    schema = {"type": "string", "pattern": isolation.optional(shape), "maxLength": max_length}
    shaped = extend_schema_field(schema)(type("ShapedField", (serializers.CharField,), {}))
    return shaped(max_length=max_length, required=False, allow_blank=True, help_text=help_text)


class ProjectIsolationInputSerializer(StrictSerializer):
    """What an admin changes of a project: where its hosts run and what guards them. A field
    left out keeps its value; an empty one falls back to the portal's default. The schema
    states each id's shape; the model says the rest (a host id goes with host tenancy)."""

    subnet_ids = _ids("Subnet", isolation.SUBNET_SHAPE)
    security_group_ids = _ids("Security group", isolation.SECURITY_GROUP_SHAPE)
    kms_key_id = _text(isolation.KMS_KEY_SHAPE, 300, "Key id, key ARN or alias.")
    tenancy = serializers.ChoiceField(choices=Project.Tenancy.choices, required=False)
    host_id = _text(isolation.HOST_SHAPE, 32, "With tenancy host.")
    instance_profile = _text(isolation.INSTANCE_PROFILE_SHAPE, 300, "Name or ARN.")
    mig_pool = serializers.ChoiceField(
        choices=Project.MigPool.choices,
        required=False,
        help_text="Where the project's MIG slices run: its own shared hosts, or the portal's "
        "pool, shared with other projects (only for a project without isolation of its own).",
    )


class ProjectChangeSerializer(serializers.ModelSerializer):
    changed_by = serializers.CharField(source="changed_by.username", default=None)

    class Meta:
        model = ProjectChange
        fields = ["changed_at", "changed_by", "before", "after"]


class ProjectViewSet(viewsets.ReadOnlyModelViewSet):
    """Projects the caller belongs to (admins and finance: all projects), with where their
    hosts run; admins PATCH that. The API serves instances.api.quotas.ProjectViewSet, which
    adds their idle stop and approval policy."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_class = ProjectFilter

    def get_queryset(self):
        return permissions.visible_projects(self.request.user).prefetch_related("memberships__user")

    @extend_schema(
        request=ProjectIsolationInputSerializer,
        responses=ProjectSerializer,
        description="Admins: set where the project's hosts run (subnets, security groups), the "
        "KMS key of their volumes, their tenancy and instance profile, and whom its MIG slices "
        "share hosts with. A field left out keeps its value; each change is kept in the "
        "project's history.",
    )
    def partial_update(self, request, slug=None):
        project = self.get_object()  # first: a project the caller cannot see is a 404
        if not permissions.can_set_isolation(request.user):
            raise Forbidden("Only admins change where a project's hosts run.")
        incoming = ProjectIsolationInputSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        services.project_isolation_set(
            project=project, actor=request.user, **incoming.validated_data
        )
        return Response(ProjectSerializer(self.get_queryset().get(pk=project.pk)).data)

    @extend_schema(responses=ProjectChangeSerializer(many=True))
    @action(detail=True, methods=["get"], filterset_class=None)
    def history(self, request, slug=None):
        """Every change of where the project's hosts run, newest first: who, when, old and
        new values."""
        project = self.get_object()
        page = self.paginate_queryset(project.changes.select_related("changed_by"))
        return self.get_paginated_response(ProjectChangeSerializer(page, many=True).data)
