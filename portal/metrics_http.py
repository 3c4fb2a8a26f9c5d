"""The HTTP side of the metrics: the request middleware and the token-protected /metrics view."""

from __future__ import annotations

import hmac
import time

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from portal.metrics import REQUEST_SECONDS, REQUESTS, scrape

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


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@never_cache
@require_GET
@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format. 404 unless PORTAL_METRICS_TOKEN is set (the page does not exist
    then); 401 without a bearer token, 403 with a wrong one."""
    expected = settings.PORTAL_METRICS_TOKEN
    if not expected:
        raise Http404
    given = _bearer(request)
    if given is None:
        response = HttpResponse("A bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # Constant time: a token compared byte by byte leaks its prefix to a patient caller.
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return HttpResponse("This token may not read the metrics.\n", status=403)
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
