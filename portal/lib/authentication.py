"""Bearer-token authentication for the API (``Authorization: Bearer gpp_...``)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal.services import token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """A personal API token. ``request.auth`` is the ApiToken (the audit log records its id,
    never the secret)."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        secret = secret.strip()
        if not secret or " " in secret:
            raise exceptions.AuthenticationFailed(
                "Send the token as 'Authorization: Bearer <token>'.", code="invalid_token"
            )
        token = token_authenticate(secret)
        if token is None:
            raise exceptions.AuthenticationFailed(
                "This token is unknown, expired or revoked; create a new one.",
                code="invalid_token",
            )
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Present so that unauthenticated API calls answer 401 (with this challenge), not 403.
        return f'{self.keyword} realm="api"'


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Tells the OpenAPI schema how to send a personal token."""

    target_class = "portal.lib.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token from POST /api/v1/auth/tokens/ or the "
            "API tokens page.",
        }
