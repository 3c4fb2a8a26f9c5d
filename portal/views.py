"""Pages of the people side: sign-in, sign-out, health."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ValidationError
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.celery import app as celery_app
from portal.celery_ops import health_report
from portal.models import ApiToken
from portal.services import token_issue, token_revoke

log = logging.getLogger(__name__)


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    template_name = "portal/logged_out.html"


def forbidden(request: HttpRequest, message: str) -> HttpResponse:
    """A page a caller may see exists but is not theirs to use: 403 with the reason."""
    return render(request, "portal/forbidden.html", {"message": message}, status=403)


def home(request: HttpRequest):
    return redirect("dashboard")


def _database_ok() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # noqa: BLE001 - any failure means "not healthy"
        log.warning("health: database check failed: %s", error)
        return False, type(error).__name__
    return True, "ok"


def _broker_ok() -> tuple[bool, str]:
    try:
        with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            # Opening a channel proves the transport works (a folder exists, Redis answers).
            conn.default_channel  # noqa: B018
    except Exception as error:  # noqa: BLE001
        log.warning("health: broker check failed: %s", error)
        return False, type(error).__name__
    return True, "ok"


@never_cache
@require_GET
@login_not_required
def health(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer; 503 naming the one that does not. Beat and
    the workers are reported with their reasons ("degraded" when one is missing)."""
    db_ok, db_state = _database_ok()
    broker_ok, broker_state = _broker_ok()
    body = {
        "status": "ok" if db_ok and broker_ok else "unavailable",
        "database": db_state,
        "broker": broker_state,
    }
    failing = [name for name, ok in (("database", db_ok), ("broker", broker_ok)) if not ok]
    if failing:
        body["failing"] = failing
    else:
        body.update(health_report())
        if body["beat"] != "ok" or body["workers"] != "ok":
            body["status"] = "degraded"
    return JsonResponse(body, status=200 if not failing else 503)


def tokens_page(request: HttpRequest) -> HttpResponse:
    """Create, list and revoke personal API tokens; a new token is shown once."""
    issued = None
    if request.method == "POST":
        if "revoke" in request.POST:
            if not request.POST["revoke"].isdigit():
                raise Http404
            token = get_object_or_404(ApiToken, pk=request.POST["revoke"], user=request.user)
            token_revoke(token=token, actor=request.user)
            messages.success(request, f"Revoked {token.name} ({token.prefix}…).")
            return redirect("tokens")
        try:
            days = int(request.POST.get("days") or settings.PORTAL_TOKEN_DEFAULT_DAYS)
        except ValueError:
            days = -1
        try:
            token, secret = token_issue(
                user=request.user, name=request.POST.get("name", ""), days=days
            )
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
        else:
            issued = {"token": token, "secret": secret}
    tokens = ApiToken.objects.filter(user=request.user)
    response = render(
        request,
        "portal/tokens.html",
        {
            "tokens": tokens,
            "issued": issued,
            "now": timezone.now(),
            "default_days": settings.PORTAL_TOKEN_DEFAULT_DAYS,
            "max_days": settings.PORTAL_TOKEN_MAX_DAYS,
        },
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
