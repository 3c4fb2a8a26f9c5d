"""``/api/v1/quotas/``: project and member quotas with what is in use (counted here, where the
hosts are). Everyone reads the quotas of their projects; only admins change them."""

from __future__ import annotations

from django.db.models import Q
from rest_framework import serializers, status, viewsets
from rest_framework.response import Response

from instances.quotas import quota_catalog_problems, usage
from portal.errors import Forbidden
from portal.models import Project, Quota, QuotaChange, User
from portal.rest import LookupField
from portal.services import quota_delete, quota_set


class QuotaChangeSerializer(serializers.ModelSerializer):
    changed_by = serializers.CharField(source="changed_by.username", default=None)

    class Meta:
        model = QuotaChange
        fields = ["changed_by", "changed_at", "before", "after"]


class QuotaSerializer(serializers.ModelSerializer):
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
    max_gpus_by_model = serializers.DictField(
        child=serializers.IntegerField(min_value=0), required=False
    )
    allowed_instance_types = serializers.ListField(child=serializers.CharField(), required=False)
    allowed_markets = serializers.DictField(
        child=serializers.ListField(
            child=serializers.ChoiceField(choices=["on_demand", "spot"]), min_length=1
        ),
        required=False,
    )
    in_use = serializers.SerializerMethodField()
    over_limit = serializers.SerializerMethodField()
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, default=None)
    changes = QuotaChangeSerializer(many=True, read_only=True)

    class Meta:
        model = Quota
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

    def validate(self, attrs):
        attrs, problems = quota_catalog_problems(attrs)
        if problems:
            raise serializers.ValidationError(problems, code="not_in_catalog")
        return attrs

    def _usage(self, obj: Quota):
        cache = self.context.setdefault("_usage", {})
        key = (obj.project_id, obj.user_id)
        if key not in cache:
            cache[key] = usage(project=obj.project, user=obj.user)
        return cache[key]

    def get_in_use(self, obj: Quota) -> dict:
        used = self._usage(obj)
        return {
            "gpus": used.gpus,
            "instances": used.instances,
            "gpus_by_model": dict(used.gpus_by_model),
        }

    def get_over_limit(self, obj: Quota) -> bool:
        used = self._usage(obj)
        over = (obj.max_gpus is not None and used.gpus > obj.max_gpus) or (
            obj.max_instances is not None and used.instances > obj.max_instances
        )
        return over or any(
            used.gpus_by_model[model] > limit for model, limit in obj.max_gpus_by_model.items()
        )


class QuotaViewSet(viewsets.ModelViewSet):
    serializer_class = QuotaSerializer
    queryset = Quota.objects.none()  # for the schema; requests use get_queryset()
    filterset_fields = {"project__slug": ["exact"], "user__username": ["exact"]}

    def get_queryset(self):
        user = self.request.user
        rows = Quota.objects.select_related("project", "user", "updated_by").prefetch_related(
            "changes__changed_by"
        )
        if user.sees_everything:
            return rows
        return (
            rows.filter(project__memberships__user=user)
            .filter(
                Q(user=None)
                | Q(user=user)
                | Q(project__memberships__role="manager", project__memberships__user=user)
            )
            .distinct()
        )

    def _require_admin(self):
        if not self.request.user.is_portal_admin:
            raise Forbidden("Only admins change quotas.")

    def create(self, request, *args, **kwargs):
        self._require_admin()
        incoming = QuotaSerializer(data=request.data, context=self.get_serializer_context())
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        project, member = data.pop("project"), data.pop("user", None)
        quota = quota_set(project=project, user=member, actor=request.user, **data)
        return Response(QuotaSerializer(quota).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        quota = self.get_object()  # first: a quota the caller cannot see is a 404
        self._require_admin()
        incoming = QuotaSerializer(
            quota,
            data=request.data,
            partial=kwargs.get("partial", False),
            context=self.get_serializer_context(),
        )
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        data.pop("project", None)
        data.pop("user", None)
        quota = quota_set(project=quota.project, user=quota.user, actor=request.user, **data)
        return Response(QuotaSerializer(self.get_queryset().get(pk=quota.pk)).data)

    def destroy(self, request, *args, **kwargs):
        quota = self.get_object()
        self._require_admin()
        quota_delete(quota=quota, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
