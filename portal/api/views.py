"""Views of portal's API: ``/api/v1/projects/``, ``/api/v1/quotas/``, ``/api/v1/auth/tokens/``.

Quotas are portal's; what is in use is counted by the instances app through
``PORTAL_QUOTA_USAGE`` (see portal.quotas). Everyone reads the quotas of their projects; only
admins change them.
"""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from audit.services import audit_set_actor, audit_set_object
from portal import permissions
from portal.api.approval import ApprovalPolicyActions
from portal.api.filters import ProjectFilter
from portal.api.idle import IdlePolicyActions
from portal.api.serializers import (
    ProjectSerializer,
    QuotaIncreaseDecisionSerializer,
    QuotaIncreaseSerializer,
    QuotaSerializer,
    TokenCreateSerializer,
    TokenIssuedSerializer,
    TokenSerializer,
)
from portal.errors import Forbidden
from portal.models import ApiToken, Quota, QuotaRequest
from portal.services import (
    quota_delete,
    quota_request_decide,
    quota_request_open,
    quota_set,
    token_issue,
    token_revoke,
)


class ProjectViewSet(ApprovalPolicyActions, IdlePolicyActions, viewsets.ReadOnlyModelViewSet):
    """Projects the caller belongs to (admins and finance: all projects), with their idle
    stop and approval policy."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_class = ProjectFilter

    def get_queryset(self):
        return permissions.visible_projects(self.request.user).prefetch_related("memberships__user")


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
    ``decline``. Others see the requests they made."""

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


class TokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Personal API tokens. POST with username and password returns a token once; send it as
    ``Authorization: Bearer <token>``. DELETE revokes."""

    serializer_class = TokenSerializer
    queryset = ApiToken.objects.none()  # for the schema; requests use get_queryset()
    throttle_scope = "auth-token"

    def get_throttles(self):
        # Only issuing is limited: it is where passwords are guessed.
        return [ScopedRateThrottle()] if self.action == "create" else []

    def get_permissions(self):
        return [AllowAny()] if self.action == "create" else [IsAuthenticated()]

    def get_authenticators(self):
        # Issuing answers to the password in the body, not to a session: no CSRF needed.
        if self.request is not None and self.request.method == "POST":
            return []
        return super().get_authenticators()

    def get_authenticate_header(self, request):
        # A wrong password answers 401 with the scheme to use, like every other API call.
        return 'Bearer realm="api"'

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenIssuedSerializer})
    def create(self, request, *args, **kwargs):
        incoming = TokenCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=incoming.validated_data["username"],
            password=incoming.validated_data["password"],
        )
        if user is None:
            raise exceptions.AuthenticationFailed(
                "Wrong username or password.", code="invalid_credentials"
            )
        # The request is not signed in: name who asked, and the token (never its secret).
        audit_set_actor(request, user)
        token, secret = token_issue(
            user=user,
            name=incoming.validated_data["name"],
            days=incoming.validated_data.get("days"),
        )
        audit_set_object(request, f"token:{token.pk}")
        body = TokenIssuedSerializer(token).data
        body["token"] = secret
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        token_revoke(token=instance, actor=self.request.user)
