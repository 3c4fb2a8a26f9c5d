"""portal's API for personal tokens: ``/api/v1/auth/tokens/`` (issue with a password, list,
revoke)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate
from django.core.validators import MaxValueValidator
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from audit.services import audit_set_actor, audit_set_object
from portal import permissions
from portal.lib.rest import StrictSerializer
from portal.models import ApiToken
from portal.services import token_issue, token_revoke


class TokenSerializer(serializers.ModelSerializer):
    state = serializers.SerializerMethodField()
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "user",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "state",
        ]
        read_only_fields = fields

    def get_state(self, obj: ApiToken) -> str:
        if obj.revoked_at:
            return "revoked"
        return "expired" if obj.expires_at <= timezone.now() else "active"


class TokenCreateSerializer(StrictSerializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(max_length=100, default="api")
    days = serializers.IntegerField(required=False, min_value=1, help_text="Default 30")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The longest life is a setting, read when a request (or the schema) needs it.
        days = self.fields["days"]
        days.max_value = settings.PORTAL_TOKEN_MAX_DAYS
        days.validators.append(
            MaxValueValidator(days.max_value, message=f"A token lives 1 to {days.max_value} days.")
        )


class TokenIssuedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown this once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


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
        # Admins see and revoke everyone's (an SSO account's scripts included); ?user= narrows.
        user = self.request.user
        rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
        if not permissions.is_admin(user):
            return rows.filter(user=user)
        named = self.request.query_params.get("user")
        return rows.filter(user__username=named) if named else rows

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "user",
                str,
                description="Admins: only this person's tokens (admins see everyone's; "
                "anyone else their own, and this is ignored).",
            )
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

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
