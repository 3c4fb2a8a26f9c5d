"""One audit row for every API call, unsafe page request, sign-in and admin action.

``AuditMiddleware`` sits first in ``MIDDLEWARE`` so that it sees the final answer of every
other middleware (a CSRF refusal, a login redirect, an SSL redirect) and every exception.

How a row is written decides what it proves, so the transaction handling is deliberate:

* Unsafe requests (POST, PUT, PATCH, DELETE) run inside ``transaction.atomic()``. The row is
  inserted in that same transaction just before it commits, so the change and its record
  commit together, or neither does: if the insert fails, the view's work rolls back and the
  caller gets 503 (fail closed). Services' own ``atomic`` blocks become savepoints and their
  ``on_commit`` callbacks wait for this outer commit, i.e. until the row is written.
* When the view raised or answered 5xx, its work is rolled back first and the row is then
  inserted on its own, so a failure is recorded even though nothing it did survives.
* Safe requests (GET, HEAD, OPTIONS) are not wrapped; the row is inserted after the response
  in autocommit. Either way audit costs one INSERT per request. (Inside the outer transaction
  a service's ``atomic`` becomes SAVEPOINT ... RELEASE instead of BEGIN ... COMMIT.)
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.conf import settings
from django.contrib.admin.utils import unquote
from django.contrib.auth import SESSION_KEY
from django.core.exceptions import RequestDataTooBig
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException, UnreadablePostError
from django.shortcuts import resolve_url
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, Resolver404, resolve
from django.utils import timezone

from audit.lib.actors import machine_actor, machine_role, unrouted_api_caller
from audit.lib.bodies import ParsedBody, parse_body, summarize
from audit.lib.context import current_refusals, current_request_id, new_request_id, sane_request_id
from audit.lib.limits import Refusal, content_length, request_refusal
from audit.lib.redaction import (
    MAX_CARRIED_SECRETS,
    MIN_SECRET,
    canonical_json,
    clean_identifier,
    clean_text,
    escape_control,
    is_secret_key,
    redact_query,
    request_secrets,
    secret_values,
)
from audit.lib.scope import SAFE_METHODS, is_audited, source_address
from audit.models import Outcome
from audit.services.events import app_version, audit_event_insert, body_digest

log = logging.getLogger(__name__)

LOGIN_ACTIONS = {"login", "login_failed"}


class AuditUnavailable(Exception):
    """The row for a request could not be written."""


MAX_RECORDED_BYTES = 2**31 - 1


def _login_paths() -> set[str]:
    paths = set()
    for name in (settings.LOGIN_URL, "admin:login"):
        try:
            paths.add(urlsplit(resolve_url(name)).path)
        except NoReverseMatch:
            continue
    return paths


def object_ref(request: HttpRequest, match) -> str:
    """What the call acted on, e.g. ``instance-type:p5.48xlarge`` or ``portal.project:3``.

    A view may say it (``audit.services.audit_set_object``); otherwise it comes from the URL:
    a DRF viewset's basename and lookup value, the Django admin's model and object id, or the
    URL name and its identifying argument.
    """
    explicit = getattr(request, "audit_object", None)
    if explicit:
        return clean_identifier(str(explicit))
    if match is None:
        return ""
    kwargs = {key: value for key, value in match.kwargs.items() if key != "format"}
    if not kwargs:
        return ""
    func = match.func
    initkwargs = getattr(func, "initkwargs", None) or {}
    view_class = getattr(func, "cls", None)
    if view_class is not None and initkwargs.get("basename"):
        lookup = getattr(view_class, "lookup_url_kwarg", None) or getattr(
            view_class, "lookup_field", "pk"
        )
        if lookup in kwargs:
            return clean_identifier(f"{initkwargs['basename']}:{kwargs[lookup]}")
    model_admin = getattr(func, "model_admin", None) or getattr(
        getattr(func, "__wrapped__", None), "__self__", None
    )
    model = getattr(model_admin, "model", None)
    if model is not None:
        for key in ("object_id", "id", "pk"):
            if key in kwargs:
                return clean_identifier(f"{model._meta.label_lower}:{unquote(str(kwargs[key]))}")
    name = match.url_name or match.view_name or "object"
    for suffix in ("-detail", "_detail", "-change", "_change"):
        name = name.removesuffix(suffix)
    key = next(
        (k for k in ("pk", "id", "uuid", "slug", "name", "object_id") if k in kwargs),
        sorted(kwargs)[0],
    )
    return clean_identifier(f"{name}:{kwargs[key]}")


class _Call:
    """What the middleware knows about one request while it runs."""

    def __init__(self, request: HttpRequest, *, refusal: Refusal | None = None):
        self.request = request
        self.time = timezone.now()
        self.started = time.perf_counter()
        self.body: bytes | None = None
        self.body_error = ""
        self.parsed = ParsedBody()
        self.refused = refusal is not None
        if refusal is not None:
            self.body_error = (
                "too large: not read" if refusal.status == 413 else "not read: request refused"
            )
        elif request.method not in SAFE_METHODS:
            # Read now, before a view consumes the stream; the view then reads the copy.
            try:
                self.body = request.body
            except RequestDataTooBig:
                self.body_error = "too large to keep"
            except (RawPostDataException, UnreadablePostError, OSError):
                self.body_error = "unreadable"
            if self.body:
                self.parsed = self._parse()

    def _parse(self) -> ParsedBody:
        request = self.request
        content_type = request.META.get("CONTENT_TYPE", "")
        try:
            form = files = None
            if content_type.startswith("multipart/form-data"):
                try:
                    form, files = request.POST, request.FILES
                except Exception:  # noqa: BLE001 - a broken upload is described, not parsed
                    form = files = None
            return parse_body(self.body, content_type=content_type, form=form, files=files)
        except Exception as error:  # noqa: BLE001 - the row is written whatever the body is
            log.warning("audit: could not summarise the body: %s", type(error).__name__)
            return _unsummarised(self.body, error)

    @property
    def secrets(self) -> list[str]:
        try:
            return secret_values(self.parsed.data)
        except Exception:  # noqa: BLE001 - a body that cannot be walked carries none we know
            return []

    def fields(self, response: HttpResponse, *, status: int | None = None) -> dict[str, Any]:
        request = self.request
        status = response.status_code if status is None else status
        match = getattr(request, "resolver_match", None)
        if match is None and len(request.path_info) <= settings.PORTAL_MAX_PATH_LENGTH:
            try:
                match = resolve(request.path_info)
            except Resolver404:
                match = None
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            # Sign-out replaced request.user already; the signal kept who it was.
            user = getattr(request, "audit_actor", None) or user
        if match is None and not self.refused and not getattr(user, "is_authenticated", False):
            caller = unrouted_api_caller(request)
            if caller is not None:
                user, request.auth = caller
        authenticated = bool(user is not None and user.is_authenticated)
        # A credential that belongs to a machine, not a person (a host's agent), names its
        # own actor: ``audit_actor`` and ``audit_role`` on ``request.auth``.
        machine = "" if authenticated else machine_actor(request)
        action = getattr(request, "audit_action", "")
        if (
            not action
            and not authenticated
            and request.method == "POST"
            and request.path_info in _login_paths()
        ):
            # A sign-in form sent back with errors never reaches authenticate(), so no
            # login-failed signal fires; it is a failed sign-in all the same.
            action = "login_failed"

        summary, digest, size = "", "", None
        if request.method not in SAFE_METHODS:
            summary, digest, size = self._body_fields()
        outcome = _outcome(request, response, status, action)
        error = getattr(request, "audit_error", "")
        refusals = current_refusals.get() or []
        if refusals and outcome == Outcome.SUCCESS:
            # A page refused and said so on a redirect or a re-shown form (portal.lib.pages).
            outcome = Outcome.DENIED
            error = error or f"refused: {refusals[-1]}"

        return {
            "time": self.time,
            "request_id": request.request_id,
            "actor_id": user.pk if authenticated else None,
            "actor_username": (
                clean_text(user.get_username(), 150) if authenticated else clean_text(machine, 150)
            ),
            "actor_role": _role(user) if authenticated else machine_role(request, machine),
            "auth_method": _auth_method(request, user, authenticated, action),
            "source_ip": source_address(request),
            "user_agent": clean_text(request.META.get("HTTP_USER_AGENT", ""), 512),
            "method": clean_text(request.method or "", 10),
            "route": clean_text(match.route, 512) if match else "",
            "view_name": clean_text(match.view_name or "", 200) if match else "",
            "path": clean_text(request.path, 2048),
            "query": redact_query(request.META.get("QUERY_STRING", "")),
            "status": status,
            "outcome": outcome,
            "duration_us": int((time.perf_counter() - self.started) * 1_000_000),
            "object_ref": object_ref(request, match),
            "action": action,
            "error": clean_text(error, 200),
            "body_bytes": size,
            "body_digest": digest,
            "body_summary": summary,
            "app_version": app_version(),
        }

    def _body_fields(self) -> tuple[str, str, int | None]:
        request = self.request
        if self.body is None:
            size = content_length(request)
            # A claimed length that no column holds is recorded as unknown, not as a failed
            # insert that would leave the request without a row.
            if size is not None and size > MAX_RECORDED_BYTES:
                size = None
            return canonical_json({"_body": self.body_error}), "", size
        if not self.body:
            return "", "", 0
        try:
            summary, redacted = summarize(self.parsed)
        except Exception as error:  # noqa: BLE001 - the row is written whatever the body is
            log.warning("audit: could not summarise the body: %s", type(error).__name__)
            summary, redacted = summarize(_unsummarised(self.body, error))
        return summary, body_digest(self.body, keyed=redacted), len(self.body)

    def insert(self, response: HttpResponse, *, status: int | None = None) -> None:
        try:
            audit_event_insert(
                fields=self.fields(response, status=status),
                durable=self.request.method not in SAFE_METHODS,
            )
        except Exception as error:
            raise AuditUnavailable(type(error).__name__) from error


def _unsummarised(body: bytes, error: Exception) -> ParsedBody:
    # What could not be read cannot be shown to hold no secret: its digest is keyed.
    return ParsedBody(
        note={"_unparsed": f"{len(body)} bytes; summarising failed: {type(error).__name__}"},
        suspicious=True,
    )


def _carried_secrets(request: HttpRequest) -> list[str]:
    """Values the request carries under secret names in its query string, headers and
    cookies (the session and CSRF cookies, and any long cookie value, which is a token more
    often than not)."""
    found: list[str] = []
    credential_cookies = {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}
    # Headers and cookies first: when a request carries more than MAX_CARRIED_SECRETS values,
    # the credentials of the caller's session are the ones kept.
    for name, value in request.META.items():
        if not name.startswith("HTTP_") or not value:
            continue
        if name == "HTTP_COOKIE":
            for part in value.split(";"):
                cookie, _, content = (piece.strip() for piece in part.partition("="))
                if cookie in credential_cookies or is_secret_key(cookie) or len(content) >= 16:
                    found.append(content)
        elif is_secret_key(name[5:]):
            found.append(value)
            found.append(value.partition(" ")[2].strip())  # "Bearer <credential>"
    # Only as much of the query as a stored row could show (a longer one is refused).
    query = request.META.get("QUERY_STRING", "")[: settings.PORTAL_MAX_QUERY_LENGTH]
    if query:
        found += [value for name, value in parse_qsl(query) if value and is_secret_key(name)]
    return found


def _role(user) -> str:
    if getattr(user, "is_superuser", False) and not getattr(user, "role", ""):
        return "superuser"
    return clean_text(str(getattr(user, "role", "") or "user"), 32)


def _auth_method(request: HttpRequest, user, authenticated: bool, action: str) -> str:
    # DRF puts the authenticator's credential on the Django request as `auth`; a token is
    # recorded by its primary key, never by its secret. A credential with an id sequence of
    # its own (a host's agent) names its notation (``audit_auth_method``).
    credential = getattr(request, "auth", None)
    own = getattr(credential, "audit_auth_method", "")
    if own:
        return escape_control(str(own))[:64]
    token_pk = getattr(credential, "pk", None)
    if token_pk is not None:
        return f"token:{escape_control(str(token_pk))}"[:64]
    if action in LOGIN_ACTIONS:
        return "password"
    if getattr(request, "audit_auth", ""):
        return escape_control(str(request.audit_auth))[:64]
    if not authenticated:
        return "none"
    session = getattr(request, "session", None)
    if session is not None and (
        session.get(SESSION_KEY) == str(user.pk) or getattr(request, "audit_actor", None)
    ):
        return "session"
    return "other"


def _outcome(request: HttpRequest, response: HttpResponse, status: int, action: str) -> str:
    if status >= 500:
        return Outcome.ERROR
    if action == "login_failed" or status >= 400:
        return Outcome.DENIED
    if 300 <= status < 400:
        # A redirect to a sign-in page is a refusal dressed as a redirect.
        location = urlsplit(response.get("Location", "")).path
        if location.endswith("/login/") and request.path_info != location:
            return Outcome.DENIED
    return Outcome.SUCCESS


def _unavailable(request: HttpRequest) -> HttpResponse:
    detail = (
        "The audit log could not record this request, so it was not carried out. "
        "Try again in a moment; if it keeps failing, tell the portal admins and quote the "
        "request id."
    )
    if request.path_info.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"code": "audit_unavailable", "detail": detail, "request_id": request.request_id},
            status=503,
        )
    else:
        html = render_to_string(
            "audit/unavailable.html", {"detail": detail, "request_id": request.request_id}
        )
        response = HttpResponse(html, status=503)
    response["Retry-After"] = "30"
    return response


def _server_error(request: HttpRequest) -> HttpResponse:
    detail = "The request failed and changed nothing; quote the request id when reporting it."
    if request.path_info.startswith("/api/"):
        return JsonResponse({"code": "server_error", "detail": detail}, status=500)
    return HttpResponse(detail, status=500, content_type="text/plain")


class AuditMiddleware:
    """Writes the audit row of every audited request and stamps every response with its
    ``X-Request-ID``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.request_id = (
            sane_request_id(request.headers.get("X-Request-ID")) or new_request_id()
        )
        token = current_request_id.set(request.request_id)
        refused = current_refusals.set([])
        refusal = request_refusal(request)
        secrets = _carried_secrets(request)
        call = None
        if settings.PORTAL_AUDIT_ENABLED and (refusal is not None or is_audited(request)):
            call = _Call(request, refusal=refusal)
            secrets += call.secrets
        # Scrubbed from logs and stored text for as long as this request runs.
        kept = list(dict.fromkeys(s for s in secrets if len(s) >= MIN_SECRET))
        scrub = request_secrets.set(
            tuple(sorted(kept[:MAX_CARRIED_SECRETS], key=len, reverse=True))
        )
        try:
            if refusal is not None:
                response = self._refuse(request, call, refusal)
            elif call is None:
                response = self.get_response(request)
            elif request.method in SAFE_METHODS:
                response = self._safe(request, call)
            else:
                response = self._unsafe(request, call)
        finally:
            request_secrets.reset(scrub)
            current_refusals.reset(refused)
            current_request_id.reset(token)
        response["X-Request-ID"] = request.request_id
        return response

    def _refuse(self, request: HttpRequest, call: _Call | None, refusal: Refusal) -> HttpResponse:
        request.audit_error = f"{refusal.code}: {refusal.detail}"
        response = refusal.response(request)
        if call is None:
            return response
        try:
            call.insert(response)
        except AuditUnavailable:
            log.exception("audit: could not record %s %s", request.method, request.path[:200])
            return _unavailable(request)
        return response

    def _safe(self, request: HttpRequest, call: _Call) -> HttpResponse:
        response = self.get_response(request)
        try:
            call.insert(response)
        except AuditUnavailable:
            log.exception("audit: could not record %s %s", request.method, request.path)
            return _unavailable(request)
        return response

    def _unsafe(self, request: HttpRequest, call: _Call) -> HttpResponse:
        failed = False
        try:
            with transaction.atomic():
                response = self.get_response(request)
                if connection.needs_rollback and response.status_code < 500:
                    # The view swallowed a database error inside our transaction: whatever it
                    # answered, its work cannot commit. Say so instead of pretending.
                    request.audit_error = getattr(request, "audit_error", "") or (
                        "django.db.transaction.TransactionManagementError"
                    )
                    response = _server_error(request)
                if response.status_code >= 500:
                    failed = True
                    transaction.set_rollback(True)
                else:
                    call.insert(response)
        except Exception as error:
            # Whatever stopped the row (or the commit), the request fails closed.
            log.exception("audit: could not record %s %s", request.method, request.path)
            request.audit_error = f"audit: {type(error).__name__}"
            try:
                call.insert(_unavailable(request), status=503)
            except AuditUnavailable:
                log.exception("audit: could not record the refusal either")
            return _unavailable(request)
        if failed:
            # Rolled back above; now the record of the failure, on its own.
            try:
                call.insert(response)
            except AuditUnavailable:
                log.exception("audit: could not record %s %s", request.method, request.path)
                return _unavailable(request)
        return response
