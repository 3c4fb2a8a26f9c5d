"""Log lines carry the request id, come out as JSON on request, and keep secrets out."""

from __future__ import annotations

import json
import logging

from audit.lib.context import current_request_id
from audit.lib.logs import JsonFormatter, RequestIdFilter


def emit(formatter: logging.Formatter, message: str, *args, **extra) -> str:
    record = logging.getLogger("portal.test").makeRecord(
        "portal.test", logging.INFO, __file__, 1, message, args, None, extra=extra
    )
    RequestIdFilter().filter(record)
    return formatter.format(record)


def test_a_json_line_carries_the_request_id_of_the_work_in_progress():
    token = current_request_id.set("req-json-0001")
    try:
        line = json.loads(emit(JsonFormatter(), "host %s is running", "i-123"))
    finally:
        current_request_id.reset(token)
    assert line["message"] == "host i-123 is running"
    assert line["request_id"] == "req-json-0001"
    assert (line["level"], line["logger"]) == ("INFO", "portal.test")
    assert line["time"].endswith("+00:00")


def test_a_line_outside_any_request_says_so():
    assert json.loads(emit(JsonFormatter(), "beat tick"))["request_id"] == "-"


def test_the_text_format_names_the_request_id(settings):
    text = logging.Formatter(settings.LOGGING["formatters"]["text"]["format"])
    token = current_request_id.set("req-text-0001")
    try:
        assert "[req-text-0001] hello" in emit(text, "hello")
    finally:
        current_request_id.reset(token)


def test_secrets_are_scrubbed_from_json_lines_and_their_extra_fields():
    secret = "AKIAIOSFODNN7EXAMPLE"
    line = emit(JsonFormatter(), "key %s leaked", secret, detail=f"aws key {secret}")
    assert secret not in line
    assert json.loads(line)["detail"] != f"aws key {secret}"


def test_the_console_handler_uses_the_configured_format_and_filter(settings):
    handler = settings.LOGGING["handlers"]["console"]
    assert handler["formatter"] == settings.PORTAL_LOG_FORMAT
    assert handler["filters"] == ["request_id"]
