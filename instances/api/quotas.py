"""Quotas in the API: ``/api/v1/quotas/`` (everyone reads the quotas of their projects; only
admins change them, through quota_set and quota_delete), ``/api/v1/quota-requests/`` (members
ask for more, admins decide), and ``/api/v1/projects/``, portal's projects with the policies
that govern their orders (``{slug}/approval-policy/``, ``{slug}/idle-policy/``).

What is in use is counted from live hosts (instances.selectors.quotas), for a whole page at once.
"""

from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from audit.services import audit_set_object
from instances.api.approvals import ApprovalPolicyActions
from instances.api.idle import IdlePolicyActions
from instances.models import Quota, QuotaChange, QuotaRequest, gpus_number
from instances.selectors.quotas import Usage, usage_of
from instances.services.quotas import (
    QUOTA_LIMIT_MOST,
    QUOTA_LIMITS_LEAST,
    QUOTA_REQUEST_GPUS_RULE,
    QUOTA_REQUEST_MOST_GPUS,
    quota_delete,
    quota_limit_rule,
    quota_request_decide,
    quota_request_open,
    quota_set,
)
from portal import permissions
from portal.api.people import ProjectViewSet as PeopleProjectViewSet
from portal.lib.errors import Forbidden
from portal.lib.rest import BoundedDictField, LookupField, StrictModelSerializer, StrictSerializer
from portal.models import Project, User


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


class QuotaLimitField(serializers.IntegerField):
    """A counted limit (null: no limit). What it holds is checked by quota_set, the one rule
    (quota_limit_rule), so the API refuses a bad limit with the service's own code and
    sentence; the range is only declared here, for the schema."""

    def __init__(self, name: str, **kwargs):
        kwargs.setdefault("error_messages", {"invalid": quota_limit_rule(name)})
        kwargs.setdefault("help_text", Quota._meta.get_field(name).help_text or None)
        super().__init__(allow_null=True, required=False, **kwargs)
        # Set after __init__, so DRF adds no validator of its own with other words.
        self.min_value, self.max_value = QUOTA_LIMITS_LEAST[name], QUOTA_LIMIT_MOST


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
    max_gpus = QuotaLimitField("max_gpus")
    max_instances = QuotaLimitField("max_instances")
    max_lease_hours = QuotaLimitField("max_lease_hours")
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
            "gpus": gpus_number(used.gpus),
            "instances": used.instances,
            "gpus_by_model": {model: gpus_number(n) for model, n in used.gpus_by_model.items()},
        }

    def get_over_limit(self, obj: Quota) -> bool:
        return obj.is_over(self._usage(obj))


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


class ProjectViewSet(ApprovalPolicyActions, IdlePolicyActions, PeopleProjectViewSet):
    """Projects the caller belongs to (admins and finance: all projects), with their idle
    stop and approval policy."""


class QuotaViewSet(viewsets.ModelViewSet):
    serializer_class = QuotaSerializer
    queryset = Quota.objects.none()  # for the schema; requests use get_queryset()
    filterset_fields = {"project__slug": ["exact"], "user__username": ["exact"]}

    def get_queryset(self):
        user = self.request.user
        rows = Quota.objects.select_related("project", "user", "updated_by").prefetch_related(
            "changes__changed_by"
        )
        rows = permissions.visible(rows, user)
        if permissions.sees_everything(user):
            return rows
        # A member reads the project's quota and their own; a manager every member's too.
        return rows.filter(
            Q(user=None) | Q(user=user) | Q(project_id__in=permissions.managed_project_ids(user))
        )

    def _require_admin(self):
        if not permissions.can_set_quotas(self.request.user):
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


class QuotaRequestViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Requests for more quota: members POST one for their project; admins see them all and
    ``POST {id}/decide/`` with ``grant`` (the GPU limit rises by what was asked) or
    ``decline``. Others see the requests they made. A project without a GPU limit takes no
    request and grants none (409 ``no_gpu_limit``): there is nothing to raise."""

    serializer_class = QuotaIncreaseSerializer
    queryset = QuotaRequest.objects.none()  # for the schema; requests use get_queryset()
    filterset_fields = {"project__slug": ["exact"], "status": ["exact"]}

    def get_queryset(self):
        return QuotaRequest.objects.for_user(self.request.user).select_related(
            "project", "requester", "decided_by"
        )

    def create(self, request, *args, **kwargs):
        incoming = QuotaIncreaseSerializer(data=request.data, context=self.get_serializer_context())
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        ask = quota_request_open(
            requester=request.user,
            project=data["project"],
            gpus=data["gpus"],
            reason=data["reason"],
        )
        audit_set_object(request, f"quota-request:{ask.pk}")
        return Response(QuotaIncreaseSerializer(ask).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaIncreaseDecisionSerializer, responses=QuotaIncreaseSerializer)
    @action(detail=True, methods=["post"])
    def decide(self, request, pk=None):
        ask = self.get_object()
        incoming = QuotaIncreaseDecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        ask = quota_request_decide(
            quota_request=ask,
            actor=request.user,
            grant=incoming.validated_data["decision"] == "grant",
            answer=incoming.validated_data.get("answer", ""),
        )
        return Response(QuotaIncreaseSerializer(ask).data)
