"""Pages of one's own account: sign-in, sign-out, API tokens; what django-axes calls."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from portal.models import ApiToken
from portal.pages import form_errors, mark_invalid, service_errors
from portal.services import token_issue, token_revoke


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    template_name = "portal/logged_out.html"


# The session key that carries a new token's secret from the POST to the page it redirects to.
# The session is stored server-side (django.contrib.sessions' database engine): the secret never
# travels in a cookie, and it is popped on the first display, so a reload shows it no more.
ISSUED_SESSION_KEY = "portal:issued-token"


class TokenForm(forms.Form):
    """A new API token: a name and how many days it lives (token_issue checks both)."""

    name = forms.CharField(
        max_length=100,
        error_messages={
            "required": "Name the token, e.g. 'laptop' or 'CI'.",
            "max_length": "Keep the name to 100 characters.",
        },
    )
    days = forms.IntegerField(
        required=False,
        error_messages={"invalid": "Give the days as a whole number, e.g. 30."},
    )


@service_errors(back="tokens")
def tokens_page(request: HttpRequest) -> HttpResponse:
    """Create, list and revoke personal API tokens. A new token is shown once: the POST
    redirects (a reload creates nothing) and the page pops the secret from the session."""
    form = TokenForm(initial={"days": settings.PORTAL_TOKEN_DEFAULT_DAYS})
    status = 200
    if request.method == "POST":
        if "revoke" in request.POST:
            if not request.POST["revoke"].isdigit():
                raise Http404
            token = get_object_or_404(ApiToken, pk=request.POST["revoke"], user=request.user)
            token_revoke(token=token, actor=request.user)
            messages.success(
                request,
                f"Revoked {token.name} ({token.prefix}…): scripts using it are refused from now "
                "on.",
            )
            return redirect("tokens")
        form = TokenForm(request.POST)
        if form.is_valid():
            days = form.cleaned_data["days"]
            with form_errors(form):
                token, secret = token_issue(
                    user=request.user,
                    name=form.cleaned_data["name"],
                    days=settings.PORTAL_TOKEN_DEFAULT_DAYS if days is None else days,
                )
                request.session[ISSUED_SESSION_KEY] = {"id": token.pk, "secret": secret}
                messages.success(request, f"Created the token {token.name}.")
                return redirect("tokens")
        status = 400
    tokens = ApiToken.objects.filter(user=request.user)
    issued = None
    shown = request.session.pop(ISSUED_SESSION_KEY, None)
    if shown:
        token = tokens.filter(pk=shown["id"]).first()
        issued = {"token": token, "secret": shown["secret"]} if token else None
    response = render(
        request,
        "portal/tokens.html",
        {
            "tokens": tokens,
            "issued": issued,
            "form": mark_invalid(form),
            "now": timezone.now(),
            "max_days": settings.PORTAL_TOKEN_MAX_DAYS,
        },
        status=status,
    )
    # The secret is on this page once: never let a browser or proxy keep a copy.
    response["Cache-Control"] = "no-store"
    return response


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
