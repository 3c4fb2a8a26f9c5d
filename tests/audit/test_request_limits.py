"""Request limits: explicit, documented, answered with the error body and an audit row.

A path, query or header longer than the portal accepts answers 414 or 431, a body larger than
it accepts 413, before anything parses, resolves or redacts it; bodies the parsers cannot read
answer 400. Each leaves one audit row saying what was refused. gunicorn's own limits sit above
the portal's, so that the portal, not gunicorn, answers a request just over them.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from django.conf import settings as django_settings

from tests.audit.conftest import row_for

ROOT = Path(__file__).resolve().parents[2]
TOKENS = "/api/v1/auth/tokens/"


def test_the_limits_are_explicit_with_the_defaults_the_docs_give():
    documented = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#") and "=" in line
    )
    limits = {
        "DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE": django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
        "DJANGO_DATA_UPLOAD_MAX_NUMBER_FIELDS": django_settings.DATA_UPLOAD_MAX_NUMBER_FIELDS,
        "DJANGO_FILE_UPLOAD_MAX_MEMORY_SIZE": django_settings.FILE_UPLOAD_MAX_MEMORY_SIZE,
        "PORTAL_MAX_UPLOAD_BYTES": django_settings.PORTAL_MAX_UPLOAD_BYTES,
        "PORTAL_MAX_PATH_LENGTH": django_settings.PORTAL_MAX_PATH_LENGTH,
        "PORTAL_MAX_QUERY_LENGTH": django_settings.PORTAL_MAX_QUERY_LENGTH,
        "PORTAL_MAX_HEADER_LENGTH": django_settings.PORTAL_MAX_HEADER_LENGTH,
    }
    for name, value in limits.items():
        assert int(documented[name]) == value, name
        page = (ROOT / "docs" / "settings.md").read_text()
        assert f"`{name}`" in page, f"docs/settings.md does not name {name}"
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024


def _gunicorn_config() -> dict[str, int]:
    tree = ast.parse((ROOT / "gunicorn.conf.py").read_text())
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
    }


def test_gunicorn_refuses_only_what_is_longer_than_the_portal_would_refuse_itself():
    config = _gunicorn_config()
    longest_line = (
        len("OPTIONS ")
        + django_settings.PORTAL_MAX_PATH_LENGTH
        + len("?")
        + django_settings.PORTAL_MAX_QUERY_LENGTH
        + len(" HTTP/1.1")
    )
    assert longest_line < config["limit_request_line"] <= 8190
    longest_field = len("X-Some-Long-Header-Name: ") + django_settings.PORTAL_MAX_HEADER_LENGTH
    assert longest_field < config["limit_request_field_size"]
    assert config["limit_request_fields"] == 100


def test_every_gunicorn_the_portal_starts_reads_that_config():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    web = compose["services"]["web"]["command"]
    assert web[0] == "gunicorn" and web[web.index("--config") + 1] == "gunicorn.conf.py"
    dockerfile = (ROOT / "Dockerfile").read_text()
    command = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    assert command[0] == "gunicorn" and command[command.index("--config") + 1] == "gunicorn.conf.py"


# --- the portal's own answers ---------------------------------------------------------------


def _refused(response, status: int, code: str) -> None:
    assert response.status_code == status
    body = response.json()
    assert body["code"] == code
    assert body["detail"].endswith(".")
    row = row_for(response)
    assert (row.status, row.outcome, row.actor_role) == (status, "denied", "anonymous")
    assert row.error.startswith(code)


def test_a_path_longer_than_the_limit_answers_414_with_the_error_body_and_a_row(web, db):
    response = web().get("/api/v1/instance-types/" + "a" * 3000 + "/")
    _refused(response, 414, "uri_too_long")
    assert "at most 2048" in response.json()["detail"]
    row = row_for(response)
    assert row.route == "" and row.path.startswith("/api/v1/instance-types/aaaa")
    assert row.path.endswith(")") and len(row.path) <= 2048


def test_a_query_longer_than_the_limit_answers_414(web, db):
    response = web().get("/api/v1/instances/?q=" + "a" * 5000)
    _refused(response, 414, "uri_too_long")
    row = row_for(response)
    assert row.view_name == "instance-list"
    assert row.query.startswith("q=aaaa") and len(row.query) <= 2048


def test_a_header_longer_than_the_limit_answers_431_naming_it(web, db):
    response = web().get("/api/v1/instances/", HTTP_USER_AGENT="a" * 9000)
    _refused(response, 431, "header_too_large")
    assert "User-Agent header is 9000 characters" in response.json()["detail"]
    assert row_for(response).user_agent.startswith("aaaa")


def test_a_body_larger_than_the_limit_answers_413_unread(web, db):
    body = json.dumps({"username": "ada", "password": "x", "note": "a" * (1024 * 1024)})
    response = web().post(TOKENS, body, content_type="application/json")
    _refused(response, 413, "body_too_large")
    row = row_for(response)
    assert json.loads(row.body_summary) == {"_body": "too large: not read"}
    assert row.body_bytes == len(body) and row.view_name == "token-list"


def test_a_page_gets_the_same_refusal_as_text(web, db):
    body = "username=ada&password=" + "a" * (1024 * 1024)
    response = web().post("/login/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413
    assert response["Content-Type"].startswith("text/plain")
    assert b"at most 1048576 bytes" in response.content
    row = row_for(response)
    assert (row.status, row.view_name) == (413, "login")


def test_a_multipart_form_whose_fields_pass_the_limit_answers_400_not_500(web, db):
    # Multipart bodies may be as large as an upload; Django refuses their non-file fields
    # beyond DATA_UPLOAD_MAX_MEMORY_SIZE itself, with its 400.
    response = web().post("/login/", {"username": "ada", "password": "a" * (1024 * 1024)})
    assert response.status_code == 400
    assert row_for(response).status == 400


def test_an_upload_may_be_larger_than_a_form_but_not_without_limit(web, ada, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.PORTAL_MAX_UPLOAD_BYTES = 100_000
    client = web(ada)
    small = SimpleUploadedFile("cur.csv", b"x" * 5000, "text/csv")
    response = client.post("/costs/reconciliation/", {"report": small})
    assert response.status_code not in (413, 500)
    big = SimpleUploadedFile("cur.csv", b"x" * 200_000, "text/csv")
    response = client.post("/costs/reconciliation/", {"report": big})
    assert response.status_code == 413
    assert b"in an upload" in response.content
    assert row_for(response).status == 413


def test_a_refused_request_changes_nothing_and_reaches_no_view(web, alice, catalog):
    from instances.models import Order

    body = json.dumps({"project": "vision-lab", "note": "a" * (1024 * 1024)})
    response = web(alice).post("/api/v1/orders/", body, content_type="application/json")
    assert response.status_code == 413
    assert not Order.objects.exists()


# --- bodies the parsers cannot read -------------------------------------------------------


@pytest.mark.parametrize("depth", [2000, 100_000])
def test_json_nested_too_deeply_answers_400_with_one_row(web, db, depth):
    body = "[" * depth + "]" * depth
    response = web().post(TOKENS, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert "nested too deeply" in response.json()["detail"]
    row = row_for(response)
    assert row.status == 400
    assert json.loads(row.body_summary) == {
        "_unparsed": f"{len(body)} bytes of JSON nested too deeply"
    }


def test_a_form_with_too_many_fields_answers_400_in_the_error_shape(web, db):
    body = "&".join(f"f{index}=v" for index in range(1500))
    response = web().post(TOKENS, body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert response.json() == {
        "code": "parse_error",
        "detail": "The form sends more fields than the portal accepts.",
    }
    assert row_for(response).status == 400


def test_a_row_is_written_even_when_summarising_the_body_fails(web, db, monkeypatch):
    import audit.middleware

    def broken(*args, **kwargs):
        raise MemoryError("summarising")

    monkeypatch.setattr(audit.middleware, "parse_body", broken)
    response = web().post(TOKENS, {"username": "ada", "password": "pw"}, "application/json")
    assert response.status_code in (400, 401)
    row = row_for(response)
    assert json.loads(row.body_summary) == {
        "_unparsed": f"{row.body_bytes} bytes; summarising failed: MemoryError"
    }
    assert row.body_digest.startswith("hmac-sha256:")
