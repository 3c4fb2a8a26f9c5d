"""portal's API for projects: ``/api/v1/projects/``, each with its members (the API serves
instances.api.quotas.ProjectViewSet, which adds the quota, idle stop and approval policy)."""

from __future__ import annotations

import django_filters
from rest_framework import serializers, viewsets

from portal import permissions
from portal.lib.rest import YesNoFilter
from portal.models import Membership, Project


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


class ProjectSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Project
        fields = ["slug", "name", "description", "is_active", "members"]


class ProjectViewSet(viewsets.ReadOnlyModelViewSet):
    """Projects the caller belongs to (admins and finance: all projects). The API serves
    instances.api.quotas.ProjectViewSet, which adds their idle stop and approval policy."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_class = ProjectFilter

    def get_queryset(self):
        return permissions.visible_projects(self.request.user).prefetch_related("memberships__user")
