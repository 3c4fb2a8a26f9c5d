"""Test-only middleware: ``X-Portal-Fault: before-view`` or ``after-view`` forces a 500.

Listed only in ``tests/settings.py``, never in the production stack. ``after-view`` runs the view
first (its saves happen), then fails, which is how the tests prove that a failed request leaves
the domain unchanged and still gets its audit row. Honoured only while the ``faults`` fixture
turns ``PORTAL_FAULT_INJECTION`` on, so no other test can trip it with a stray header.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class InjectedFault(RuntimeError):
    """Raised on purpose by FaultInjectionMiddleware."""


class FaultInjectionMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not settings.PORTAL_FAULT_INJECTION:
            return None
        fault = request.headers.get("X-Portal-Fault")
        if not fault:
            return None
        if fault == "before-view":
            raise InjectedFault("fault injected before the view")
        try:
            response = view_func(request, *view_args, **view_kwargs)
            if callable(getattr(response, "render", None)):
                response.render()
        except Exception as error:
            # The view refused or failed on its own (404, 403 ...); the 500 is still forced.
            raise InjectedFault("fault injected after the view") from error
        raise InjectedFault("fault injected after the view")
