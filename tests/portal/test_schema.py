"""The OpenAPI schema generates without a warning and validates."""

from __future__ import annotations

import io

from django.core.management import call_command


def test_the_openapi_schema_is_complete_and_valid(db):
    out = io.StringIO()
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out
    )
    assert '"/api/v1/orders/{id}/approve/"' in out.getvalue()
    assert '"bearerToken"' in out.getvalue()
