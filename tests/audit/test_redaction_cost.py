"""Redaction costs time linear in what it is given, and reads only a bounded prefix of it.

It runs on what anonymous callers send, before they sign in: the old patterns took 9-28 s on
16 KB of one letter and held the interpreter, so every other request waited. Here every entry
point gets 1 MB of the inputs that hurt a backtracking engine (long runs of one character,
alternating classes, every secret shape cut short) and must return within a budget that a
loaded two-core machine still meets. The budget is counted in the thread's own CPU time, not
wall time: a backtracking pattern burns seconds of CPU, while a busy machine (``make test`` runs
several workers on two cores) only stretches the wall clock of a call that did little work.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import time

import pytest
from django.test import RequestFactory

from audit.lib import redaction
from audit.lib.bodies import parse_body, summarize_body
from audit.lib.logredact import redact_record
from audit.lib.redaction import (
    MAX_CARRIED_SECRETS,
    REDACTED,
    SCAN_LIMIT,
    clean_identifier,
    clean_text,
    escape_control,
    redact_data,
    redact_identifier,
    redact_query,
    redact_text,
    request_secrets,
    secret_values,
)
from audit.middleware import _carried_secrets

MB = 1 << 20
# Seconds one call may take on 1 MB. Measured here: 70 ms at most, most under 10 ms.
BUDGET = 0.5


def _fill(unit: str, head: str = "") -> str:
    """``head`` followed by ``unit`` repeated, exactly 1 MB in all."""
    body = unit * ((MB - len(head)) // len(unit) + 1)
    return (head + body)[:MB]


ADVERSARIAL = {
    # Long runs of one character.
    "letters": _fill("a"),
    "capitals": _fill("A"),
    "digits": _fill("7"),
    "spaces": _fill(" "),
    "dashes": _fill("-"),
    "equals": _fill("="),
    "escapes": _fill("\x1b"),
    "accents": _fill("é"),
    "surrogates": _fill("\ud800"),
    # Alternating classes.
    "aA1": _fill("aA1"),
    "a.": _fill("a."),
    "a-": _fill("a-"),
    "a space": _fill("a "),
    "a=": _fill("a="),
    "a:": _fill("a:"),
    "a/": _fill("a/"),
    "a@": _fill("a@"),
    "base64": _fill("aA1+/=_-"),
    "random runs": _fill("Ab1" * 11 + " "),
    # Near-misses of every secret shape.
    "password= then letters": _fill("a", "password="),
    "password= repeated": _fill("password="),
    'password=" repeated': _fill('password="'),
    "quoted name then letters": _fill("a", "'password': '"),
    "name run then =": _fill("a_password", "x") + "=",
    "token: then letters": _fill("a", "token: "),
    "Bearer then letters": _fill("a", "Bearer "),
    "Bearer then spaces": _fill(" ", "Bearer"),
    "Bearer repeated": _fill("Bearer aaaaaaa1 "),
    "Basic repeated": _fill("basic "),
    "PEM without END": _fill("A", "-----BEGIN PRIVATE KEY-----"),
    "BEGIN then capitals": _fill("A", "-----BEGIN "),
    "BEGIN repeated": _fill("-----BEGIN PRIVATE KEY-----"),
    "END repeated": _fill("-----END "),
    "AKIA repeated": _fill("AKIA"),
    "AKIA then capitals": _fill("A", "AKIA"),
    "AWS key ids": _fill("AKIAIOSFODNN7EXAMPL1 "),
    "eyJ then letters": _fill("a", "eyJ"),
    "eyJ segments": _fill("-eyJaaaaa.bbbbb"),
    "ghp_ repeated": _fill("ghp_"),
    "gpp_ then letters": _fill("a", "gpp_"),
    "glpat- repeated": _fill("-glpat-aaaa"),
    "xoxb- repeated": _fill("xoxb-"),
    "sk- repeated": _fill("sk-"),
    "sk_live_ repeated": _fill("sk_live_"),
    "AIza repeated": _fill("AIza"),
    "scheme then letters": _fill("b", "a://"),
    "schemes repeated": _fill("a.a://"),
    "credentials repeated": _fill("a://b:c@"),
    "ssh key prefixes": _fill("ssh-rsa AAAA"),
    "ssh-rsa then spaces": _fill(" ", "ssh-rsa"),
    "secret words": _fill("csrf session secret credential "),
}


def _timed(function, *args, **kwargs) -> float:
    """CPU seconds this thread spent in the call. The garbage collector is held off during it:
    in a worker that has run hundreds of tests, a full collection of their leftovers can start
    inside the call and take 0.6 s of this thread's CPU (a clean-clone run of 2026-12-04 failed
    so on a call that takes 1 ms), which says nothing of the call. (Collecting before each
    call as well cost 40 s a test on a big heap.)"""
    gc.disable()
    try:
        started = time.thread_time()
        function(*args, **kwargs)
        return time.thread_time() - started
    finally:
        gc.enable()


def _too_slow(function, inputs=ADVERSARIAL) -> list[str]:
    slow = []
    for name, text in inputs.items():
        seconds = _timed(function, text)
        if seconds > BUDGET:
            slow.append(f"{name}: {seconds:.2f} s")
    return slow


@pytest.fixture(params=[0, MAX_CARRIED_SECRETS], ids=["no carried secrets", "64 carried"])
def carried(request):
    """Run with no secrets carried by the request, and with as many as are ever kept."""
    secrets = tuple(f"carried-secret-{index:02d}" for index in range(request.param))
    token = request_secrets.set(secrets)
    yield secrets
    request_secrets.reset(token)


ENTRY_POINTS = {
    "redact_text": redact_text,
    "redact_identifier": redact_identifier,
    "clean_text": clean_text,
    "clean_identifier": clean_identifier,
    "escape_control": escape_control,
    "redact_query": redact_query,
    "redact_data": lambda text: redact_data({"note": text, "items": [text, {"deep": text}]}),
    "secret_values": lambda text: secret_values({"password": text, "items": [{"token": text}]}),
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_entry_point_returns_promptly_on_a_megabyte_of_hostile_text(entry_point, carried):
    assert not _too_slow(ENTRY_POINTS[entry_point])


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/x-www-form-urlencoded", "text/plain"]
)
def test_a_megabyte_body_of_each_kind_is_summarised_promptly(content_type, carried):
    def summarise(text: str):
        if content_type == "application/json":
            body = json.dumps({"username": text, "password": "x"}, ensure_ascii=False)
        elif content_type.endswith("urlencoded"):
            body = f"username=ada&password=x&note={text}"
        else:
            body = text
        raw = body.encode("utf-8", "surrogatepass")
        parse_body(raw, content_type=content_type)
        summarize_body(raw, content_type=content_type)

    assert not _too_slow(summarise)


def test_malformed_json_of_a_megabyte_is_described_promptly():
    bodies = {
        "nested": "[" * MB,
        "nested objects": '{"a":' * (MB // 5),
        "truncated": '{"username": "' + "a" * MB,
        "invalid UTF-8": b"\xff" * MB,
        "NUL bytes": "\x00" * MB,
    }
    for name, body in bodies.items():
        raw = body if isinstance(body, bytes) else body.encode()
        assert _timed(summarize_body, raw, content_type="application/json") < BUDGET, name
        summary, _ = summarize_body(raw, content_type="application/json")
        assert json.loads(summary)["_unparsed"].startswith(f"{len(raw)} bytes of "), name


def test_the_log_filter_scrubs_a_megabyte_message_and_traceback_promptly(carried):
    def log_it(text: str):
        try:
            raise ValueError(text)
        except ValueError:
            record = logging.LogRecord(
                "portal", logging.ERROR, __file__, 1, "could not parse %s", (text,), sys.exc_info()
            )
        redact_record(record)

    assert not _too_slow(log_it)


def test_the_values_a_request_carries_are_collected_promptly():
    factory = RequestFactory()
    slow = []
    # HTTP carries no lone surrogates (WSGI decodes headers as Latin-1).
    for name, text in ADVERSARIAL.items():
        if name == "surrogates":
            continue
        request = factory.get(
            "/api/v1/instances/",
            {"api_key": text, "page": text},
            HTTP_USER_AGENT=text,
            HTTP_X_API_KEY=text,
            HTTP_COOKIE=f"sessionid={text}; theme={text}",
        )
        seconds = _timed(_carried_secrets, request)
        if seconds > BUDGET:
            slow.append(f"{name}: {seconds:.2f} s")
    assert not slow


# --- what a bounded prefix means for what is stored -------------------------------------


def test_a_long_text_is_cut_where_scanning_stopped_and_says_how_much_was_not_scanned():
    text = "word " * 20_000
    out = redact_text(text)
    assert out.startswith("word word")
    assert len(out) < SCAN_LIMIT + 40
    unread = len(text) - len(out.partition("…")[0])
    assert out.endswith(f"…(+{unread} not scanned)")


def test_a_secret_past_the_scanned_prefix_is_never_returned():
    text = "word " * 20_000 + "AKIAIOSFODNN7EXAMPLE and password=hunter2"
    out = redact_text(text)
    assert "AKIA" not in out and "hunter2" not in out


def test_a_secret_the_cut_falls_in_leaves_no_fragment_behind():
    key = "AKIAIOSFODNN7EXAMPLE"
    for offset in range(1, len(key)):
        # Words up to the key, which the scanned prefix ends inside, `offset` characters in.
        text = ("w " * SCAN_LIMIT)[: SCAN_LIMIT - offset - 1] + " " + key + " tail" * 10_000
        assert text.index(key) == SCAN_LIMIT - offset
        out = redact_text(text)
        assert "AKIA" not in out and key[-6:] not in out, offset


def test_a_carried_secret_longer_than_the_scanned_prefix_is_scrubbed_whole():
    secret = "p4ss-" + "x" * (2 * SCAN_LIMIT)
    token = request_secrets.set((secret,))
    try:
        out = redact_text(f"could not parse {secret!r}")
        whole = redact_text(f"{secret} and more")
    finally:
        request_secrets.reset(token)
    assert out.startswith(f"could not parse '{REDACTED}")
    assert "xxxx" not in out
    assert whole.startswith(f"{REDACTED}…(+") and "xxxx" not in whole


@pytest.mark.parametrize(
    "text",
    [
        'password="hunter2-and-the-rest-was-cut',
        "{'api_key': 'k-998877",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x",
    ],
)
def test_a_secret_whose_end_never_comes_is_redacted_to_the_end(text):
    out = redact_text(text)
    assert "hunter2" not in out and "998877" not in out and "MIIE" not in out
    assert REDACTED in out


def test_a_body_summary_reads_a_bounded_amount_and_marks_what_it_did_not_read():
    body = {f"field{index:03d}": "x" * 3000 for index in range(40)}
    summary = redact_data(body)
    assert summary["field000"].startswith("xxx")
    assert summary["…"].endswith("keys not scanned")
    assert len(json.dumps(summary)) < 64 * 1024


def test_a_form_with_more_fields_than_django_accepts_says_how_many_were_not_read():
    body = "&".join(f"f{index}=v" for index in range(5000)).encode()
    parsed = parse_body(body, content_type="application/x-www-form-urlencoded")
    assert parsed.data["…"] == "+4000 more fields not read"


def test_a_lone_surrogate_is_escaped_not_a_reason_to_fail():
    assert redact_text("a\ud800b AKIAIOSFODNN7EXAMPLE") == f"a\\ud800b {REDACTED}"
    assert clean_text("x\udfffy") == "x\\udfffy"


def test_the_linear_engine_is_what_runs_the_patterns():
    # A pattern compiled by Python's re could backtrack again; every pattern that reads text
    # of any shape is RE2's.
    for name in (
        "_PRIVATE_KEY",
        "_URL_CREDENTIALS",
        "_AUTH_SCHEME",
        "_SECRET_PAIR",
        "_SHAPED_SECRET",
        "_RANDOM_RUN",
        "_MAYBE_SECRET",
    ):
        assert type(getattr(redaction, name)).__module__ == "re2", name
