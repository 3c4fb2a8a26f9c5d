"""Who made a call, for its audit row, when it is not simply the signed-in person.

- A credential that belongs to a machine rather than a person (a host's agent) names its own
  actor: ``audit_actor``, ``audit_role`` and ``audit_auth_method`` on ``request.auth``, so the
  audit app needs to import nothing of the app that issues it.
- An ``/api/`` path that no route matches never reaches a DRF view, so nobody authenticated
  the token it carries: :func:`unrouted_api_caller` does, for the row only, with the API's
  own default authenticators.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.settings import api_settings

from audit.lib.redaction import clean_text


def machine_actor(request: HttpRequest) -> str:
    return str(getattr(getattr(request, "auth", None), "audit_actor", "") or "")


def machine_role(request: HttpRequest, machine: str) -> str:
    if not machine:
        return "anonymous"
    return clean_text(str(getattr(request.auth, "audit_role", "") or "machine"), 32)


def unrouted_api_caller(request: HttpRequest) -> tuple[Any, Any] | None:
    """(user, credential) of an unrouted ``/api/`` call that sends a valid credential in its
    ``Authorization`` header, or None. The answer stays the 404 it was: this only names the
    caller. A credential that does not authenticate leaves the row anonymous."""
    if not request.path_info.startswith("/api/") or not request.META.get("HTTP_AUTHORIZATION"):
        return None
    wrapped = Request(request)
    for authenticator_class in api_settings.DEFAULT_AUTHENTICATION_CLASSES:
        try:
            found = authenticator_class().authenticate(wrapped)
        except APIException:
            return None
        if found is not None and getattr(found[0], "is_authenticated", False):
            return found
    return None
