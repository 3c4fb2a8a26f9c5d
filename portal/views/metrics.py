"""``/metrics``: the Prometheus scrape, behind a bearer token (portal/metrics.py computes it)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from portal.metrics import scrape


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
