"""The OpenAPI schema generates without a warning and validates."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient


def test_the_openapi_schema_is_complete_and_valid(db):
    out = io.StringIO()
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out
    )
    assert '"/api/v1/orders/{id}/approve/"' in out.getvalue()
    assert '"bearerToken"' in out.getvalue()


def _schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_every_operation_documents_the_414_a_too_long_url_answers(db, api, alice, settings):
    settings.PORTAL_MAX_QUERY_LENGTH = 100
    operations = dict(_operations(_schema()))
    undocumented = [name for name, op in operations.items() if "414" not in op["responses"]]
    assert not undocumented
    answer = operations["GET /api/v1/orders/"]["responses"]["414"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert "query string longer than 100" in answer["description"]
    api.force_authenticate(alice)
    response = api.get("/api/v1/orders/?status=" + "x" * 101)
    assert response.status_code == 414
    assert response.json()["code"] == "uri_too_long"


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nope/", "/api/v1/orders/abc/extra/", "/api/nope", "/api/v1/instances/x/y/z/"],
)
def test_an_api_path_no_pattern_matches_answers_the_apis_json_404(db, api, alice, path):
    api.force_authenticate(alice)
    for client in (api, APIClient()):  # signed in, and anonymous
        response = client.get(path)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == {
            "code": "not_found",
            "detail": "No API endpoint has this path; /api/v1/schema/ lists every one.",
        }


def test_a_page_path_no_pattern_matches_is_still_the_404_page(db, client):
    response = client.get("/apis-are-elsewhere/")
    assert response.status_code == 404
    assert "Page not found" in response.content.decode()
