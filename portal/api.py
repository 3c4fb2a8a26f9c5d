"""REST API for projects: ``/api/v1/projects/``."""

from __future__ import annotations

from rest_framework import serializers, viewsets

from portal.models import Membership, Project


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
    """Projects the caller belongs to (admins and finance: all projects)."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_fields = ["is_active"]

    def get_queryset(self):
        return Project.objects.for_user(self.request.user).prefetch_related("memberships__user")
