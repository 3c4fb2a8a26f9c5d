"""Single sign-on's plumbing around mozilla-django-oidc: the provider's endpoints found from its
discovery document, the authentication backends (the provider's, and passwords that single
sign-on can turn off), and the views that start and end a sign-in.

Who a signed-in person is, and what their groups give them, is portal/services/sso.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import Http404
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from audit.lib.context import note_refusal
from audit.services import audit_set_actor
from portal.services.sso import SignInRefused, sso_sign_in

# How long a discovery document is trusted before it is read again (keys rotate).
DISCOVERY_SECONDS = 3600
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


def sso_enabled() -> bool:
    return bool(settings.PORTAL_OIDC_ISSUER and settings.PORTAL_OIDC_CLIENT_ID)


@dataclass(frozen=True)
class Provider:
    """What the issuer's discovery document says (OpenID Connect Discovery 1.0)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str
    end_session_endpoint: str


_discovered: dict[str, tuple[float, Provider]] = {}


def provider() -> Provider:
    """The configured provider's endpoints, read from its discovery document at most once an
    hour per process."""
    issuer = settings.PORTAL_OIDC_ISSUER.rstrip("/")
    if not issuer:
        raise ImproperlyConfigured("PORTAL_OIDC_ISSUER is not set: single sign-on is off.")
    known = _discovered.get(issuer)
    if known and time.monotonic() - known[0] < DISCOVERY_SECONDS:
        return known[1]
    response = requests.get(
        f"{issuer}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT
    )
    response.raise_for_status()
    document = response.json()
    found = Provider(
        issuer=document.get("issuer", issuer),
        authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"],
        userinfo_endpoint=document.get("userinfo_endpoint", ""),
        jwks_uri=document["jwks_uri"],
        end_session_endpoint=document.get("end_session_endpoint", ""),
    )
    _discovered[issuer] = (time.monotonic(), found)
    return found


def oidc_setting(attr: str, *args):
    """mozilla-django-oidc's settings, with the provider's endpoints from discovery."""
    if attr in ENDPOINTS:
        return getattr(provider(), ENDPOINTS[attr])
    return import_from_settings(attr, *args)


class ProviderBackend(OIDCAuthenticationBackend):
    """Signs in whoever the provider vouches for on the callback, matched on their ``sub``
    and given roles and projects by their groups (portal/services/sso.py). Idle on every
    other sign-in (a password's), and cheap to build: Django builds every backend for each
    sign-in, so nothing is read from the provider until a callback needs it."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if request is None or not sso_enabled() or "code" not in request.GET:
            return None
        found = provider()
        self.OIDC_OP_TOKEN_ENDPOINT = found.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = found.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks_uri
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def retrieve_matching_jwk(self, token):
        """The provider's key that signed ``token``: the one its header's ``kid`` names, or,
        when the header names none (some providers and test servers), the only key of the
        token's algorithm; several candidates and no kid is refused, never guessed."""
        header = jwt.get_unverified_header(token)
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        keys = [
            key
            for key in response.json().get("keys", [])
            if key.get("alg", header.get("alg")) == header.get("alg")
            and key.get("use", "sig") == "sig"
        ]
        if "kid" in header:
            keys = [key for key in keys if key.get("kid") == header["kid"]]
        if len(keys) != 1:
            raise SuspiciousOperation("No single key of the provider's matches the token.")
        return jwt.PyJWK(keys[0])

    def get_or_create_user(self, access_token, id_token, payload):
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            claims.update(self.get_userinfo(access_token, id_token, payload))
        try:
            user = sso_sign_in(issuer=provider().issuer, claims=claims)
        except SignInRefused as refusal:
            self.request.sso_refusal = str(refusal)
            note_refusal(refusal.code)
            return None
        audit_set_actor(self.request, user, auth_method="sso")
        return user


class PasswordBackend(ModelBackend):
    """Django's password check, which PORTAL_OIDC_ONLY turns off for everyone but the
    break-glass accounts (the sign-in form and password-issued API tokens both come here)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if (
            settings.PORTAL_OIDC_ONLY
            and sso_enabled()
            and username not in settings.PORTAL_OIDC_BREAK_GLASS
        ):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class SignInView(OIDCAuthenticationRequestView):
    """Starts a sign-in at the provider (a 404 while single sign-on is off)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        # The parent reads the endpoints at construction; only once a request needs them.
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        if not sso_enabled():
            raise Http404
        self.OIDC_OP_AUTH_ENDPOINT = provider().authorization_endpoint
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider sends the browser back here; a refusal is said on the sign-in page."""

    get_settings = staticmethod(oidc_setting)

    def login_failure(self):
        reason = getattr(self.request, "sso_refusal", "") or (
            "Single sign-on did not complete. Try again, or ask an admin if it keeps failing."
        )
        messages.error(self.request, reason)
        if not getattr(self.request, "sso_refusal", ""):
            note_refusal("sso_failed")
        return super().login_failure()


def logout_url(request) -> str | None:
    """Where to send the browser after signing out of the portal so the provider's session
    ends too (RP-initiated logout), or None when it offers no such endpoint."""
    id_token = request.session.get("oidc_id_token")
    if not (sso_enabled() and id_token):
        return None
    end = provider().end_session_endpoint
    if not end:
        return None
    query = {
        "id_token_hint": id_token,
        "client_id": settings.OIDC_RP_CLIENT_ID,
        "post_logout_redirect_uri": request.build_absolute_uri("/login/"),
    }
    return f"{end}?{urlencode(query)}"
