"""The portal's middleware, in the order MIDDLEWARE runs them (portal/settings/base.py):

- ``CSPMiddleware``: Content-Security-Policy, django-csp's middleware with the one exception the
  portal needs. The policy itself is ``CONTENT_SECURITY_POLICY`` in settings. DRF's browsable
  API pages (an ``/api/`` URL opened in a browser) are DRF's own templates, and they carry a few
  fixed ``style=""`` attributes (a float, a margin, a border) and, when Pygments is installed,
  one ``<style>`` block of highlighting rules. Rather than ``'unsafe-inline'``, those pages alone
  allow exactly those attribute values and that block, by hash (``'unsafe-hashes'`` plus one
  hash per value): a style anyone else writes, or any script, is still refused there.
- ``MetricsMiddleware``: counts and times every answer by route pattern (``/metrics`` itself is
  portal/views/metrics.py).
- ``ApiVersionMiddleware``: every ``/api/`` answer says the API's version in ``API-Version``
  (the schema's ``info.version``), so a client such as ``gpu`` learns it from any call it makes
  and can warn that it is older than the API, without fetching the schema.
- ``RejectNulMiddleware``: no value with a NUL byte reaches a lookup. (Every page needs a login
  through Django's own LoginRequiredMiddleware; DRF marks its views login-not-required, so the
  API answers 401 itself, and the schema and its docs are public.)
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from functools import cache
from pathlib import Path

import rest_framework
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from csp.middleware import PolicyParts
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import UnreadablePostError
from django.shortcuts import render
from django.utils.html import escape
from rest_framework.compat import pygments_css
from rest_framework.renderers import BrowsableAPIRenderer

from portal.lib.rest import has_nul, nul_error_body
from portal.metrics import REQUEST_SECONDS, REQUESTS

# A literal attribute value: template variables ({{ }}) or tags ({% %}) make no fixed value.
_LITERAL_STYLE = re.compile(r'style="([^"{}]*)"')


def _hash_source(value: str) -> str:
    digest = hashlib.sha256(value.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


@cache
def browsable_api_style_hashes() -> tuple[str, ...]:
    """A CSP hash source for each fixed style attribute in DRF's templates.

    Read from the installed DRF, so that an upgrade that changes its markup changes the hashes
    with it (the browser tests fail on any refused style, should it not)."""
    templates = Path(rest_framework.__file__).parent / "templates" / "rest_framework"
    values = {
        value
        for path in templates.rglob("*.html")
        for value in _LITERAL_STYLE.findall(path.read_text(encoding="utf-8"))
    }
    return tuple(sorted(_hash_source(value) for value in values))


@cache
def browsable_api_code_style_hashes(code_style: str | None) -> tuple[str, ...]:
    """The hash of the <style> block DRF writes for Pygments (autoescaped, as it is sent)."""
    css = pygments_css(code_style) if code_style else None
    return (_hash_source(escape(css)),) if css else ()


class CSPMiddleware(BaseCSPMiddleware):
    """django-csp's middleware; DRF's browsable pages also allow DRF's own fixed styles."""

    def get_policy_parts(self, request, response, report_only: bool = False) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        renderer = getattr(response, "accepted_renderer", None)
        if isinstance(renderer, BrowsableAPIRenderer):
            parts.update = {
                **(parts.update or {}),
                "style-src": list(browsable_api_code_style_hashes(renderer.code_style)),
                "style-src-attr": ["'unsafe-hashes'", *browsable_api_style_hashes()],
            }
        return parts


# The label of a request no route matched (a 404 for an unknown path, a refusal before routing):
# the raw path would give every scanner's guess its own series.
UNMATCHED = "<unmatched>"


def route_of(request: HttpRequest) -> str:
    """The route pattern that served the request (``api/v1/instances/<pk>/``), never its path."""
    match = getattr(request, "resolver_match", None)
    if match is None or not match.route:
        return UNMATCHED
    return match.route


class MetricsMiddleware:
    """Counts every answer by route pattern, method and status, and times it.

    Second in MIDDLEWARE, right after audit: it sees every answer of the middleware below it
    and of the views (audit's own refusals are in the audit log). Methods outside the standard
    set share one label.
    """

    METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route = route_of(request)
        method = request.method if request.method in self.METHODS else "other"
        REQUESTS.labels(route, method, str(response.status_code)).inc()
        REQUEST_SECONDS.labels(route, method).observe(elapsed)
        return response


class ApiVersionMiddleware:
    """``API-Version`` on every answer under ``/api/``, errors included: the version the schema
    states (SPECTACULAR_SETTINGS["VERSION"]), one value for both."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith("/api/"):
            response["API-Version"] = settings.SPECTACULAR_SETTINGS["VERSION"]
        return response


class RejectNulMiddleware:
    """A NUL byte in a URL part, a query parameter or a form field answers 400 naming the field.

    PostgreSQL cannot store or compare text holding a NUL, so a lookup with one fails inside the
    database (a 500) unless it is refused first. One check here covers every route's lookup
    kwargs, every filter and page form; JSON bodies are checked by their serializer fields.
    It runs after the login rule, so anonymous visitors are still sent to sign in first.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        fields = [name for name, value in view_kwargs.items() if has_nul(value)]
        if any(has_nul(value) for value in view_args):
            fields.append("path")
        fields += _nul_fields(request.GET)
        if request.method == "POST" and request.content_type in FORM_TYPES:
            try:
                fields += _nul_fields(request.POST)
            except (SuspiciousOperation, RequestDataTooBig, UnreadablePostError):
                # Too many fields, too large, cut off: nothing here to look up. The API's
                # parsers answer it in the error shape; a page gets Django's 400.
                if not request.path_info.startswith("/api/"):
                    raise
        if not fields:
            return None
        body = nul_error_body(fields)
        if request.path_info.startswith("/api/"):
            return JsonResponse(body, status=400)
        return render(request, "portal/bad_request.html", {"message": body["detail"]}, status=400)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _nul_fields(data) -> list[str]:
    return [name for name, values in data.lists() if has_nul(name) or any(map(has_nul, values))]
