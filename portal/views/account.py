"""Pages of one's own account: sign-in and sign-out, and what django-axes calls (API tokens:
portal/views/tokens.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from portal.lib.sso import logout_url, sso_enabled


class LoginView(auth_views.LoginView):
    """The password form and, with single sign-on configured, the provider's button (with
    PORTAL_OIDC_ONLY the form is folded away: only break-glass accounts still use it)."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        return super().get_context_data(
            **kwargs,
            sso=sso_enabled(),
            sso_name=settings.PORTAL_OIDC_PROVIDER_NAME,
            sso_only=sso_enabled() and settings.PORTAL_OIDC_ONLY,
        )


class LogoutView(auth_views.LogoutView):
    """Signs out of the portal and, after a single sign-on, of the provider too (RP-initiated
    logout) when it offers that: the signed-out page sends the browser on to the provider.
    Not a redirect: the sign-out is a form, and the Content-Security-Policy's form-action
    (this origin only) stops a form's redirect to another origin."""

    template_name = "portal/logged_out.html"

    def post(self, request, *args, **kwargs):
        self.provider_logout = logout_url(request)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return super().get_context_data(
            **kwargs,
            provider_logout=getattr(self, "provider_logout", None),
            sso_name=settings.PORTAL_OIDC_PROVIDER_NAME,
        )


# AccessAttempt.username holds this many characters; a longer name must not reach the table.
AXES_USERNAME_LENGTH = 255


def sign_in_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The name django-axes counts a sign-in under (AXES_USERNAME_CALLABLE), cut to what its
    table holds: an over-long name is an ordinary failed sign-in and still counts towards the
    lock (names that share their first 255 characters share one count)."""
    source = credentials if credentials else getattr(request, "data", request.POST)
    name = source.get("username") if source else None
    return name[:AXES_USERNAME_LENGTH] if isinstance(name, str) else name


def lockout(request: HttpRequest, credentials: dict | None = None, *args) -> HttpResponse:
    """What django-axes answers after too many failed sign-ins: 429 with Retry-After."""
    retry = int(settings.AXES_COOLOFF_TIME.total_seconds())
    message = (
        f"Too many failed sign-ins for this account from your address. Try again in "
        f"{retry // 60} minutes."
    )
    if request.path.startswith("/api/"):
        response = JsonResponse({"code": "too_many_attempts", "detail": message}, status=429)
    else:
        response = render(
            request, "portal/login.html", {"lockout": message, "form": None}, status=429
        )
    response["Retry-After"] = str(retry)
    return response
