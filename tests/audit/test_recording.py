"""What one audit row says about one call: who, how, from where, what, and with what result."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.lib.redaction import redact_text
from audit.models import AuditEvent
from tests.audit.conftest import row_for, rows_for
from tests.audit.urls import TOKEN_SECRET
from tests.conftest import PASSWORD

LIST = "/api/v1/instance-types/"


@pytest.fixture
def as_alice(web, alice, catalog):
    return web(alice)


def test_every_response_carries_the_request_id_of_its_row(as_alice):
    response = as_alice.get(LIST)
    assert len(response["X-Request-ID"]) == 32
    assert row_for(response).request_id == response["X-Request-ID"]


def test_a_sane_request_id_from_the_caller_is_kept(as_alice):
    response = as_alice.get(LIST, HTTP_X_REQUEST_ID="client-7f3a-0001")
    assert response["X-Request-ID"] == "client-7f3a-0001"
    assert row_for(response).request_id == "client-7f3a-0001"


@pytest.mark.parametrize(
    "offered",
    ["short", "x" * 65, "has space in it", "line\nbreak-123456", "AKIAIOSFODNN7EXAMPLE", ""],
)
def test_an_odd_or_secret_looking_request_id_is_replaced_by_a_new_one(as_alice, offered):
    response = as_alice.get(LIST, HTTP_X_REQUEST_ID=offered)
    assert response["X-Request-ID"] != offered
    assert len(response["X-Request-ID"]) == 32
    assert row_for(response).request_id == response["X-Request-ID"]


def test_an_api_call_records_actor_route_view_object_status_and_timing(as_alice, alice):
    response = as_alice.get("/api/v1/instance-types/p5.48xlarge/", HTTP_USER_AGENT="curl/8.5")
    row = row_for(response)
    assert (row.actor_id, row.actor_username, row.actor_role) == (alice.pk, "alice", "researcher")
    assert row.auth_method == "session"
    assert row.method == "GET" and row.path == "/api/v1/instance-types/p5.48xlarge/"
    assert row.route == "api/v1/instance-types/(?P<name>[^/]+)/$"
    assert row.view_name == "instance-type-detail"
    assert row.object_ref == "instance-type:p5.48xlarge"
    assert (row.status, row.outcome) == (200, "success")
    assert row.user_agent == "curl/8.5"
    assert row.source_ip == "127.0.0.1"
    assert 0 < row.duration_us < 10_000_000
    assert row.app_version == "0.1.0"
    assert row.time.tzinfo is not None
    assert row.body_digest == "" and row.body_summary == ""


def test_the_actor_is_a_snapshot_that_outlives_a_rename(as_alice, alice):
    response = as_alice.get(LIST)
    alice.username = "alice-renamed"
    alice.save()
    assert row_for(response).actor_username == "alice"


def test_an_anonymous_api_call_is_recorded_as_denied(web, db):
    response = web().get(LIST)
    row = row_for(response)
    assert response.status_code in (401, 403)
    assert (row.actor_id, row.actor_role, row.auth_method) == (None, "anonymous", "none")
    assert row.outcome == "denied"


@pytest.mark.urls("tests.audit.urls")
def test_a_token_call_records_the_token_by_id_and_never_its_secret(web, alice):
    response = web().get("/api/test/whoami/", HTTP_AUTHORIZATION=f"Bearer {TOKEN_SECRET}")
    assert response.json() == {"username": "alice"}
    row = row_for(response)
    assert row.auth_method == "token:42"
    assert row.actor_username == "alice"
    stored = json.dumps(list(AuditEvent.objects.values()), default=str)
    assert TOKEN_SECRET not in stored


def test_without_trusted_proxies_a_forwarded_for_header_is_ignored(as_alice):
    response = as_alice.get(LIST, HTTP_X_FORWARDED_FOR="6.6.6.6", REMOTE_ADDR="203.0.113.9")
    assert row_for(response).source_ip == "203.0.113.9"


def test_behind_one_trusted_proxy_the_client_is_the_address_the_proxy_saw(as_alice, settings):
    settings.PORTAL_TRUSTED_PROXIES = 1
    # The client claimed 6.6.6.6; our proxy appended the address it really came from.
    response = as_alice.get(
        LIST, HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.23", REMOTE_ADDR="10.0.0.2"
    )
    assert row_for(response).source_ip == "198.51.100.23"


def test_behind_two_trusted_proxies_the_second_entry_from_the_right_is_the_client(
    as_alice, settings
):
    settings.PORTAL_TRUSTED_PROXIES = 2
    response = as_alice.get(
        LIST, HTTP_X_FORWARDED_FOR="6.6.6.6, 2001:db8::7, 10.0.0.3", REMOTE_ADDR="10.0.0.2"
    )
    assert row_for(response).source_ip == "2001:db8::7"


def test_a_request_that_bypassed_the_proxies_falls_back_to_the_socket_address(as_alice, settings):
    settings.PORTAL_TRUSTED_PROXIES = 2
    response = as_alice.get(LIST, HTTP_X_FORWARDED_FOR="6.6.6.6", REMOTE_ADDR="192.0.2.44")
    assert row_for(response).source_ip == "192.0.2.44"


def test_a_failed_sign_in_is_recorded_as_denied_without_the_password(web, alice):
    response = web().post("/login/", {"username": "alice", "password": "not-her-password"})
    assert response.status_code == 200
    row = row_for(response)
    assert (row.action, row.outcome, row.auth_method) == ("login_failed", "denied", "password")
    assert row.actor_id is None
    assert json.loads(row.body_summary) == {"username": "alice", "password": "[REDACTED]"}
    assert "not-her-password" not in json.dumps(list(AuditEvent.objects.values()), default=str)
    assert row.body_digest.startswith("hmac-sha256:")


def test_an_empty_sign_in_form_is_a_failed_sign_in_too(web, db):
    row = row_for(web().post("/login/", {}))
    assert (row.action, row.outcome) == ("login_failed", "denied")


def test_sign_in_and_sign_out_are_recorded_with_the_person(web, alice):
    client = web()
    signed_in = row_for(client.post("/login/", {"username": "alice", "password": PASSWORD}))
    assert (signed_in.action, signed_in.outcome, signed_in.actor_username) == (
        "login",
        "success",
        "alice",
    )
    signed_out = row_for(client.post("/logout/"))
    assert (signed_out.action, signed_out.actor_username) == ("logout", "alice")
    assert signed_out.auth_method == "session"


def test_an_admin_change_is_recorded_with_the_object_it_changed(web, ada, projects):
    vision = projects["vision-lab"]
    response = web(ada).post(
        f"/admin/portal/project/{vision.pk}/change/",
        {
            "slug": "vision-lab",
            "name": "Vision Lab (renamed)",
            "description": "",
            "is_active": "on",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    row = row_for(response)
    assert row.object_ref == f"portal.project:{vision.pk}"
    assert row.view_name == "admin:portal_project_change"
    assert (row.actor_username, row.outcome) == ("ada", "success")
    assert json.loads(row.body_summary)["name"] == "Vision Lab (renamed)"


def test_admin_pages_are_recorded_even_when_only_read(web, ada):
    row = row_for(web(ada).get("/admin/portal/project/"))
    assert row.view_name == "admin:portal_project_changelist"


def test_reading_an_ordinary_page_is_not_recorded_but_carries_a_request_id(as_alice):
    response = as_alice.get("/catalog/")
    assert response.status_code == 200
    assert response["X-Request-ID"]
    assert rows_for(response) == []


def test_an_unsafe_request_to_a_page_is_recorded(as_alice):
    response = as_alice.post("/health/")
    assert response.status_code == 405
    row = row_for(response)
    assert (row.method, row.outcome, row.view_name) == ("POST", "denied", "health")


def test_a_page_post_without_signing_in_is_a_denial_dressed_as_a_redirect(web, db):
    response = web().post("/catalog/")
    assert response.status_code == 302
    assert row_for(response).outcome == "denied"


@pytest.mark.urls("tests.audit.urls")
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/instance-types/?gpu_model=Z80", 400),
        ("/api/v1/audit/events/", 403),
        ("/api/v1/instance-types/x9.huge/", 404),
        ("/api/test/throttled/", 429),
    ],
)
def test_refusals_are_recorded_as_denied_with_their_status(as_alice, path, status):
    response = as_alice.get(path)
    assert response.status_code == status
    row = row_for(response)
    assert (row.status, row.outcome) == (status, "denied")


def test_a_forced_failure_is_recorded_as_an_error_with_its_exception_class(as_alice, faults):
    response = as_alice.get(LIST, HTTP_X_PORTAL_FAULT="after-view")
    assert response.status_code == 500
    assert response["X-Request-ID"]
    row = row_for(response)
    assert (row.status, row.outcome) == (500, "error")
    assert row.error == "tests.faults.InjectedFault"


def test_the_fault_header_is_ignored_while_the_switch_is_off(as_alice):
    response = as_alice.get(LIST, HTTP_X_PORTAL_FAULT="after-view")
    assert response.status_code == 200


def test_control_characters_and_ansi_escapes_are_stored_escaped(as_alice):
    response = as_alice.get(
        "/api/v1/instance-types/%1b[31mred%1b[0m/",
        HTTP_USER_AGENT="evil\x1b[2J\x1b[31mtool\r\n\u202eexe",
    )
    row = row_for(response)
    assert "\x1b" not in row.path and "\\x1b[31mred" in row.path
    assert row.user_agent == "evil\\x1b[2J\\x1b[31mtool\\x0d\\x0a\\u202eexe"
    assert "\x1b" not in row.object_ref


def test_secrets_in_the_query_are_redacted_and_the_rest_kept(as_alice):
    response = as_alice.get(LIST + "?gpu_model=H100&api_key=k-123456&next=/x%3Ftoken%3Dabc")
    query = row_for(response).query
    assert "gpu_model=H100" in query
    assert "api_key=[REDACTED]" in query
    assert "k-123456" not in query and "abc" not in query


@pytest.mark.urls("tests.audit.urls")
def test_a_plain_body_gets_its_sha256_and_a_summary(web, ada):
    body = json.dumps({"slug": "nlp-lab", "name": "NLP"}).encode()
    response = web(ada).post("/api/test/projects/", body, content_type="application/json")
    row = row_for(response)
    assert row.body_digest == "sha256:" + hashlib.sha256(body).hexdigest()
    assert row.body_bytes == len(body)
    assert json.loads(row.body_summary) == {"slug": "nlp-lab", "name": "NLP"}
    assert row.object_ref == "project:nlp-lab"


@pytest.mark.urls("tests.audit.urls")
def test_a_body_that_held_a_secret_gets_a_keyed_digest_that_cannot_be_guessed(web, ada):
    body = json.dumps({"slug": "x", "name": "X", "password": "hunter2"}).encode()
    row = row_for(web(ada).post("/api/test/projects/", body, content_type="application/json"))
    assert row.body_digest.startswith("hmac-sha256:")
    assert hashlib.sha256(body).hexdigest() not in row.body_digest


def test_with_audit_off_nothing_is_recorded_but_the_request_id_remains(as_alice, settings):
    settings.PORTAL_AUDIT_ENABLED = False
    response = as_alice.get(LIST)
    assert response.status_code == 200
    assert response["X-Request-ID"]
    assert rows_for(response) == []


def test_audit_adds_exactly_one_statement_to_a_list_call(as_alice, settings):
    as_alice.get(LIST)  # warm up: content types, session, caches

    def statements(enabled: bool) -> list[str]:
        settings.PORTAL_AUDIT_ENABLED = enabled
        with CaptureQueriesContext(connection) as captured:
            assert as_alice.get(LIST).status_code == 200
        return [query["sql"] for query in captured.captured_queries]

    off, on = statements(False), statements(True)
    assert len(on) - len(off) == 1
    inserts = [sql for sql in on if sql.startswith('INSERT INTO "audit_event"')]
    assert len(inserts) == 1


def test_a_request_with_a_bad_host_is_recorded_too(web, db):
    response = web().get(LIST, HTTP_HOST="evil.example.com")
    assert response.status_code == 400
    row = row_for(response)
    assert (row.status, row.outcome, row.actor_role) == (400, "denied", "anonymous")


def test_a_body_too_large_is_refused_unread_with_413_and_recorded(web, ada, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    body = json.dumps({"name": "x" * 500})
    response = web(ada).post("/api/v1/projects/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"
    assert "at most 100 bytes" in response.json()["detail"]
    row = row_for(response)
    assert (row.status, row.outcome, row.view_name) == (413, "denied", "project-list")
    assert json.loads(row.body_summary) == {"_body": "too large: not read"}
    assert (row.body_bytes, row.body_digest) == (len(body), "")


def test_an_uploaded_file_is_listed_by_name_and_size_not_stored(web, ada):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("keys.pem", b"-----BEGIN PRIVATE KEY-----\nabc\n", "text/plain")
    response = web(ada).post("/api/v1/projects/", {"note": "hello", "file": upload})
    summary = json.loads(row_for(response).body_summary)
    assert summary == {
        "note": "hello",
        "file": [{"file": "keys.pem", "bytes": 32, "type": "text/plain"}],
    }


def test_rows_written_by_the_middleware_filter_by_time_like_any_other(as_alice):
    from django.utils import timezone

    before = timezone.now()
    response = as_alice.get(LIST)
    after = timezone.now()
    found = AuditEvent.objects.filter(time__gte=before, time__lte=after)
    assert list(found.values_list("request_id", flat=True)) == [response["X-Request-ID"]]


def test_head_and_options_calls_to_the_api_are_recorded(as_alice):
    for response in (as_alice.head(LIST), as_alice.options(LIST)):
        assert row_for(response).method in ("HEAD", "OPTIONS")


@pytest.mark.urls("tests.audit.urls")
def test_a_password_in_the_body_can_name_the_actor_of_an_unsigned_request(web, alice):
    body = {"username": "alice", "password": PASSWORD}
    row = row_for(web().post("/api/test/issue/", body, content_type="application/json"))
    assert (row.actor_username, row.auth_method, row.object_ref) == ("alice", "password", "token:7")
    assert row.status == 201
    failed = row_for(
        web().post(
            "/api/test/issue/",
            {"username": "alice", "password": "nope-nope"},
            content_type="application/json",
        )
    )
    assert (failed.action, failed.outcome, failed.actor_id) == ("login_failed", "denied", None)


def test_a_portal_api_token_is_recorded_by_its_id_and_never_its_secret(web, alice, catalog):
    from portal.services import token_issue

    token, secret = token_issue(user=alice, name="laptop")
    response = web().get(LIST, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 200
    row = row_for(response)
    assert (row.actor_username, row.auth_method) == ("alice", f"token:{token.pk}")
    assert secret not in json.dumps(list(AuditEvent.objects.values()), default=str)
    assert redact_text(f"Bearer {secret}") == "Bearer [REDACTED]"


def test_a_host_agent_call_is_recorded_as_its_host_not_as_a_personal_token(
    web, ada, alice, running_host
):
    from instances.services import agent_credential_issue

    host = running_host()
    secret = agent_credential_issue(instance=host)
    credential = host.agent_credential
    response = web().post(
        f"/api/v1/instances/{host.pk}/metrics/",
        {
            "readings": [
                {"at": timezone.now().isoformat(), "utilization": 80, "memory_used_mib": 512}
            ]
        },
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Agent {secret}",
    )
    assert response.status_code == 201, response.content
    row = row_for(response)
    assert (row.actor_id, row.actor_username, row.actor_role, row.auth_method) == (
        None,
        f"agent:{host.pk}",
        "agent",
        f"agent-credential:{credential.pk}",
    )
    assert secret not in json.dumps(list(AuditEvent.objects.values()), default=str)
    # The audit page shows the host as the actor, and the export says the same.
    admin = web(ada)
    page = admin.get(f"/audit/?actor=agent:{host.pk}").content.decode()
    assert f">agent:{host.pk}</a>" in page and f"agent · agent-credential:{credential.pk}" in page
    lines = b"".join(admin.get(f"/audit/export.jsonl?actor=agent:{host.pk}").streaming_content)
    exported = [json.loads(line) for line in lines.splitlines()]
    assert [(line["actor_username"], line["auth_method"]) for line in exported] == [
        (f"agent:{host.pk}", f"agent-credential:{credential.pk}")
    ]


@pytest.mark.parametrize("method", ["get", "delete"])
def test_an_unrouted_api_call_with_a_valid_token_is_recorded_with_its_actor(web, alice, method):
    from portal.services import token_issue

    token, secret = token_issue(user=alice, name="laptop")
    response = getattr(web(), method)(
        "/api/v1/no-such-thing/", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert response.status_code == 404
    row = row_for(response)
    assert (row.actor_id, row.actor_username, row.actor_role, row.auth_method, row.outcome) == (
        alice.pk,
        "alice",
        alice.role,
        f"token:{token.pk}",
        "denied",
    )
    assert secret not in json.dumps(list(AuditEvent.objects.values()), default=str)


def test_an_unrouted_api_call_with_a_bad_token_stays_anonymous_and_still_404(web, db):
    response = web().get("/api/v1/no-such-thing/", HTTP_AUTHORIZATION="Bearer gpp_not-a-token")
    assert response.status_code == 404
    row = row_for(response)
    assert (row.actor_id, row.actor_username, row.actor_role, row.auth_method) == (
        None,
        "",
        "anonymous",
        "none",
    )
