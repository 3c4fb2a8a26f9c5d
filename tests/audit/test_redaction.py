"""Secrets never reach the audit table or the logs, wherever they sit and whatever they are
called; control characters never reach them raw."""

from __future__ import annotations

import json
import logging
import string
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.lib.bodies import summarize_body
from audit.lib.redaction import (
    REDACTED,
    clean_text,
    escape_control,
    is_secret_key,
    redact_data,
    redact_query,
    redact_text,
)
from audit.models import AuditEvent
from tests.audit.conftest import row_for

# --- the rules, one by one ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "new_password1",
        "passwd",
        "pwd",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "HTTP_AUTHORIZATION",
        "client_secret",
        "aws_secret_access_key",
        "AWS_ACCESS_KEY_ID",
        "refresh_token",
        "csrfmiddlewaretoken",
        "sessionid",
        "private_key",
        "ssh_private_key",
        "signature",
        "X-Auth",
        "otp",
        "key",
    ],
)
def test_a_secret_name_is_recognised_however_it_is_spelled(name):
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name", ["username", "author", "ssh_public_key", "description", "spinner", "project", "next"]
)
def test_an_ordinary_name_is_left_alone(name):
    assert not is_secret_key(name)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("AKIAIOSFODNN7EXAMPLE", ""),
        ("key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY here", "key  here"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz\n-----END OPENSSH PRIVATE KEY-----", ""),
        ("Authorization: Bearer 9f8e7d6c5b4a", "Authorization:  "),
        ("token=abc123&page=2", "token=&page=2"),
        ('{"password": "correct horse"}', '{"password": ""}'),
        ("postgres://portal:s3cret@db:5432/portal", "postgres://portal:@db:5432/portal"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl", ""),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345", ""),
        ("xoxb-1234567890-abcdefghij", ""),
        ("Bearer gpp_abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq", "Bearer "),
        ("token gpp_abcdefghijklmnopqrst", "token "),
    ],
)
def test_a_secret_looking_value_is_redacted_wherever_it_sits(text, kept):
    assert redact_text(text).replace(REDACTED, "") == kept


@pytest.mark.parametrize(
    "text",
    [
        "550e8400-e29b-41d4-a716-446655440000",
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0",
        "/api/v1/instance-types/p5.48xlarge/",
        "basic configuration of a token bucket",
    ],
)
def test_ordinary_text_is_left_readable(text):
    assert redact_text(text) == text


def test_control_characters_ansi_escapes_and_bidi_overrides_are_escaped():
    assert escape_control("a\x1b[31mb\x00c\u202ed\ud800") == "a\\x1b[31mb\\x00c\\u202ed\\ud800"
    assert escape_control("plain ünïcödé ✓") == "plain ünïcödé ✓"


def test_long_text_is_cut_and_says_by_how_much():
    assert clean_text("x" * 600, 100).endswith("…(+512)")
    assert len(clean_text("x" * 600, 100)) <= 100


def test_structures_are_redacted_by_key_at_any_depth_and_numbers_kept_exactly():
    data = {"a": {"b": [{"token": "t"}, {"n": 1.5, "m": 7}]}, "Password": ["x", "y"]}
    assert redact_data(data) == {
        "a": {"b": [{"token": REDACTED}, {"n": "1.5", "m": 7}]},
        "Password": REDACTED,
    }


def test_a_query_keeps_its_shape_with_secrets_redacted():
    assert redact_query("gpu_model=H100&api_key=k&x=%1b") == (
        "gpu_model=H100&api_key=[REDACTED]&x=%5Cx1b"
    )


def test_a_form_body_is_summarised_with_its_secrets_redacted():
    summary, redacted = summarize_body(
        b"username=ada&password=pw&csrfmiddlewaretoken=t",
        content_type="application/x-www-form-urlencoded",
    )
    assert json.loads(summary) == {
        "username": "ada",
        "password": REDACTED,
        "csrfmiddlewaretoken": REDACTED,
    }
    assert redacted


def test_a_body_that_is_not_json_or_a_form_is_described_not_stored():
    summary, redacted = summarize_body(b"AKIAIOSFODNN7EXAMPLE", content_type="text/plain")
    assert json.loads(summary) == {"_content_type": "text/plain"}
    assert redacted


def test_invalid_json_is_described_not_stored():
    summary, _ = summarize_body(b'{"password": "pw', content_type="application/json")
    assert json.loads(summary) == {"_unparsed": "16 bytes of invalid JSON"}


# --- the property: secrets in body, query and headers reach neither table nor logs ----------

ALPHABET = string.ascii_letters + string.digits + "-_.~!*@$^"
B64 = string.ascii_letters + string.digits + "+/"


def _secret(prefix: str = "S3c"):
    # A distinctive prefix keeps a secret from matching unrelated text by chance.
    return st.text(ALPHABET, min_size=8, max_size=40).map(lambda body: prefix + body)


SECRET_NAMES = st.sampled_from(
    [
        "password",
        "new_password2",
        "api_key",
        "apiKey",
        "client_secret",
        "aws_secret_access_key",
        "access_token",
        "refresh_token",
        "private_key",
        "ssh_private_key",
        "auth",
        "Authorization",
        "sessionid",
        "signature",
        "x_auth_token",
    ]
)
INNOCENT_NAMES = st.sampled_from(["description", "note", "comment", "next", "name", "label"])


@st.composite
def looks_like_a_secret(draw):
    """(value, the parts of it that must not be stored) for secrets known by their shape."""
    kind = draw(
        st.sampled_from(["aws_id", "aws_secret", "pem", "bearer", "jwt", "github", "portal"])
    )
    if kind == "portal":
        token = "gpp_" + draw(
            st.text(string.ascii_letters + string.digits + "-_", min_size=43, max_size=43)
        )
        return token, [token]
    if kind == "aws_id":
        value = "AKIA" + draw(
            st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16)
        )
        return value, [value]
    if kind == "aws_secret":
        value = "Ab1" + draw(st.text(B64, min_size=37, max_size=37))
        return value, [value]
    if kind == "pem":
        lines = draw(
            st.lists(
                st.text(B64, min_size=16, max_size=60).map("Pk3".__add__), min_size=1, max_size=4
            )
        )
        label = draw(st.sampled_from(["RSA ", "EC ", "OPENSSH ", ""]))
        value = (
            f"-----BEGIN {label}PRIVATE KEY-----\n"
            + "\n".join(lines)
            + f"\n-----END {label}PRIVATE KEY-----"
        )
        return value, [line for line in lines if len(line) >= 12]
    if kind == "bearer":
        token = draw(st.text(string.ascii_letters + string.digits, min_size=24, max_size=48))
        return f"Bearer {token}", [token]
    if kind == "jwt":
        parts = [
            draw(st.text(string.ascii_letters + string.digits + "_-", min_size=8, max_size=30))
            for _ in range(3)
        ]
        value = "eyJ" + ".".join(parts)
        return value, [value]
    token = "ghp_" + draw(st.text(string.ascii_letters + string.digits, min_size=36, max_size=36))
    return token, [token]


@st.composite
def secret_laden_request(draw):
    named = draw(st.dictionaries(SECRET_NAMES, _secret(), min_size=1, max_size=4))
    shaped = draw(st.dictionaries(INNOCENT_NAMES, looks_like_a_secret(), min_size=1, max_size=3))
    query_named = draw(st.dictionaries(SECRET_NAMES, _secret("Q3s"), min_size=1, max_size=2))
    header_secret = draw(_secret("H3d"))
    cookie_secret = draw(_secret("C0k"))
    agent_secret, agent_parts = draw(looks_like_a_secret())
    # A caller's own request id is stored as it is, unless it looks like a secret.
    request_id = draw(
        st.one_of(
            st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(
                "AKIA".__add__
            ),
            st.text(string.ascii_letters + string.digits, min_size=36, max_size=36).map(
                "ghp_".__add__
            ),
        )
    )
    hidden = [
        *named.values(),
        *query_named.values(),
        header_secret,
        cookie_secret,
        *agent_parts,
        request_id,
    ]
    for _value, parts in shaped.values():
        hidden += parts
    body = {**named, **{name: value for name, (value, _parts) in shaped.items()}, "slug": "x"}
    return {
        "body": body,
        "query": query_named,
        "headers": {
            "HTTP_AUTHORIZATION": f"Bearer {header_secret}",
            "HTTP_X_API_KEY": header_secret,
            "cookie": f"remember_token={cookie_secret}; theme=dark",
            "HTTP_USER_AGENT": f"client/1.0 ({agent_secret.splitlines()[0]})",
            "HTTP_X_REQUEST_ID": request_id,
        },
        "hidden": hidden,
    }


def _stored_text() -> str:
    return json.dumps(list(AuditEvent.objects.values()), default=str, ensure_ascii=False)


def _forms(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), json.dumps(secret)[1:-1]]


@pytest.mark.urls("tests.audit.urls")
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=secret_laden_request())
def test_no_secret_reaches_the_audit_table_or_the_logs(web, ada, catalog, caplog, call):
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    client = web(ada)
    query = "?" + urlencode(call["query"])
    headers = dict(call["headers"])
    cookie = headers.pop("cookie")
    anonymous = {**headers, "HTTP_COOKIE": cookie}
    # The session cookie has to travel in the same Cookie header as the secret one.
    session = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    headers["HTTP_COOKIE"] = f"{session}; {cookie}"
    # Signed in by session (no Authorization header, which an API token check would refuse
    # first), so that the view runs and its exception quotes every secret of the body.
    session_only = {name: value for name, value in headers.items() if name != "HTTP_AUTHORIZATION"}
    explodes = client.post(
        "/api/test/explodes/" + query,
        json.dumps(call["body"]),
        content_type="application/json",
        **session_only,
    )
    assert explodes.status_code == 500
    calls = [
        explodes,
        client.get("/api/v1/audit/events/" + query, **headers),
        web().post("/login/" + query, {**call["body"], "username": "ada"}, **anonymous),
    ]
    # Whatever each answered (a bearer token may be refused), each left exactly one row.
    assert all(row_for(response) for response in calls)
    stored = _stored_text()
    logged = caplog.text + "\n".join(record.getMessage() for record in caplog.records)
    assert "ValueError" in caplog.text  # the exception and its message were logged
    for secret in call["hidden"]:
        for form in _forms(secret):
            assert form not in stored, f"{secret!r} stored"
            assert form not in logged, f"{secret!r} logged"


def test_an_exception_quoting_a_password_is_logged_without_it(caplog, web, ada, settings):
    settings.ROOT_URLCONF = "tests.audit.urls"
    with caplog.at_level(logging.ERROR):
        response = web(ada).post(
            "/api/test/explodes/",
            {"password": "plain-words-are-hard"},
            content_type="application/json",
        )
    assert response.status_code == 500
    assert "Internal Server Error: /api/test/explodes/" in caplog.text
    assert "ValueError: could not parse" in caplog.text
    assert "plain-words-are-hard" not in caplog.text


def test_a_runserver_style_request_line_is_logged_without_its_secrets(caplog):
    logger = logging.getLogger("django.server")
    with caplog.at_level(logging.INFO, logger="django.server"):
        logger.info('"%s" %s %s', "GET /api/v1/x/?api_key=k-998877&page=2 HTTP/1.1", "200", "12")
    assert "k-998877" not in caplog.text
    assert "api_key=[REDACTED]&page=2" in caplog.text


def test_an_object_named_after_a_token_keeps_its_id_but_not_a_secret():
    from audit.lib.redaction import clean_identifier

    assert clean_identifier("token:42") == "token:42"
    assert clean_identifier("api-key:7") == "api-key:7"
    assert clean_identifier("token:gpp_abcdefghijklmnopqrstuvwxyz012345") == "token:[REDACTED]"
