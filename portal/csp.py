"""Content-Security-Policy: django-csp's middleware, with the one exception the portal needs.

The policy itself is ``CONTENT_SECURITY_POLICY`` in settings. DRF's browsable API pages (an
``/api/`` URL opened in a browser) are DRF's own templates, and they carry a few fixed
``style=""`` attributes (a float, a margin, a border) and, when Pygments is installed, one
``<style>`` block of highlighting rules. Rather than ``'unsafe-inline'``, those pages alone
allow exactly those attribute values and that block, by hash (``'unsafe-hashes'`` plus one hash
per value): a style anyone else writes, or any script, is still refused there.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from pathlib import Path

import rest_framework
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from csp.middleware import PolicyParts
from django.utils.html import escape
from rest_framework.compat import pygments_css
from rest_framework.renderers import BrowsableAPIRenderer

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
