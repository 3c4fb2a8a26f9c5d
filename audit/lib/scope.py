"""audit/lib/scope.py: which requests the audit records, and the address each came from (read
before the view runs, by audit/middleware.py, and by django-axes for its lockouts)."""

from __future__ import annotations

import ipaddress
import re
from functools import cache

from django.conf import settings
from django.http import HttpRequest

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


@cache
def _audited_pages(patterns: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns) or r"(?!)")


def is_audited(request: HttpRequest) -> bool:
    """API calls, admin and audit pages whatever the method; any other page when unsafe, or
    when it is one of PORTAL_AUDIT_PAGES (opening a host's JupyterLab)."""
    if request.method not in SAFE_METHODS:
        return True
    path = request.path_info
    if _audited_pages(tuple(settings.PORTAL_AUDIT_PAGES)).fullmatch(path):
        return True
    return path.startswith(tuple(settings.PORTAL_AUDIT_PATH_PREFIXES)) and (
        path not in settings.PORTAL_AUDIT_QUIET_PATHS
    )


def source_address(request: HttpRequest) -> str:
    """The caller's address, believing X-Forwarded-For only as far as our own proxies.

    With N trusted proxies, each appended the address it saw to X-Forwarded-For, so the client
    is the N-th entry from the right; anything further left came from the client and may be
    spoofed. With no trusted proxy the header is ignored.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.PORTAL_TRUSTED_PROXIES
    if hops > 0:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= hops:
            candidate = _ip(forwarded[-hops])
            if candidate:
                return candidate
    return _ip(remote) or ""


def _ip(text: str) -> str | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
