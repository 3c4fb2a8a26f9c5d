"""Views of portal's API: ``/api/v1/projects/`` and ``/api/v1/auth/tokens/`` (quotas and the
policies served beside a project: instances.api.quotas)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from audit.services import audit_set_actor, audit_set_object
from portal import permissions
from portal.api.filters import ProjectFilter
from portal.api.serializers import (
    ProjectSerializer,
    TokenCreateSerializer,
    TokenIssuedSerializer,
    TokenSerializer,
)
from portal.models import ApiToken
from portal.services import token_issue, token_revoke


class ProjectViewSet(viewsets.ReadOnlyModelViewSet):
    """Projects the caller belongs to (admins and finance: all projects). The API serves
    instances.api.quotas.ProjectViewSet, which adds their idle stop and approval policy."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_class = ProjectFilter

    def get_queryset(self):
        return permissions.visible_projects(self.request.user).prefetch_related("memberships__user")


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
