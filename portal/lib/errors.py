"""Errors a user can cause, raised by services and turned into 4xx answers by the API and pages.

Services stay free of HTTP: they raise these (or Django's ValidationError for field errors),
and ``portal.lib.rest.exception_handler`` maps them to ``{"code", "detail", "fields"}``.
"""

from __future__ import annotations


class PortalError(Exception):
    """A refusal with a machine-readable code and one sentence saying what to change."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.field = field


class Forbidden(PortalError):
    status = 403
    code = "forbidden"


class Conflict(PortalError):
    """The request is well-formed but the state of things refuses it (quota, state, budget)."""

    status = 409
    code = "conflict"
