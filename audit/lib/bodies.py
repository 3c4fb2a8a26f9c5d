"""Request bodies for the audit row: parsed (JSON, form, multipart) within limits, redacted and
summarised."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from audit.lib.redaction import (
    MAX_FORM_FIELDS,
    MAX_ITEMS,
    MAX_SUMMARY,
    SCAN_LIMIT,
    _contains_redaction,
    canonical_json,
    redact_data,
    redact_text,
)


@dataclass
class ParsedBody:
    """A request body as the audit log sees it: its structure (JSON or form fields), or a note
    saying what it was, and whether its raw text looked like it held a secret."""

    data: Any = None
    note: dict[str, Any] | None = None
    suspicious: bool = False


def parse_body(body: bytes, *, content_type: str, form: Any = None, files: Any = None):
    """Parse a body once, before the view runs: JSON and form bodies keep their structure,
    multipart forms list their files by name and size, anything else is described by type.

    Never raises for what a caller sent: a body that cannot be parsed is described instead."""
    content_type = (content_type or "").split(";")[0].strip().lower()
    if not body:
        return ParsedBody()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return ParsedBody(data=json.loads(body.decode("utf-8")))
        except RecursionError:
            # json.loads raises RecursionError, not ValueError, on ~1,000 levels of nesting.
            return _unparsed(body, "JSON nested too deeply")
        except (UnicodeDecodeError, ValueError):
            return _unparsed(body, "invalid JSON")
    if content_type == "application/x-www-form-urlencoded":
        fields = body.decode("utf-8", "replace").split("&", MAX_FORM_FIELDS)
        data = _group_pairs(parse_qsl("&".join(fields[:MAX_FORM_FIELDS]), keep_blank_values=True))
        if len(fields) > MAX_FORM_FIELDS:
            data["…"] = f"+{fields[-1].count('&') + 1} more fields not read"
        return ParsedBody(data=data)
    if content_type == "multipart/form-data" and form is not None:
        data = {key: _one_or_many(form.getlist(key)) for key in form}
        for name in files or {}:
            data[name] = [
                {"file": upload.name, "bytes": upload.size, "type": upload.content_type}
                for upload in files.getlist(name)
            ]
        return ParsedBody(data=data)
    text = body[:4096].decode("utf-8", "replace")
    return ParsedBody(
        note={"_content_type": content_type or "unknown"}, suspicious=redact_text(text) != text
    )


def _unparsed(body: bytes, what: str) -> ParsedBody:
    text = body[:SCAN_LIMIT].decode("utf-8", "replace")
    return ParsedBody(
        note={"_unparsed": f"{len(body)} bytes of {what}"},
        # A body too long to read whole may hold a secret past what was read.
        suspicious=len(body) > SCAN_LIMIT or redact_text(text) != text,
    )


def summarize(parsed: ParsedBody) -> tuple[str, bool]:
    """(redacted canonical JSON summary, whether anything was redacted)."""
    if parsed.data is None:
        return (canonical_json(parsed.note) if parsed.note else ""), parsed.suspicious
    summary = redact_data(parsed.data)
    redacted = _contains_redaction(summary)
    text = canonical_json(summary)
    if len(text) > MAX_SUMMARY:
        keys = list(summary) if isinstance(summary, dict) else []
        text = canonical_json({"_truncated": True, "_keys": keys[:MAX_ITEMS]})
    return text, redacted


def summarize_body(
    body: bytes, *, content_type: str, form: Any = None, files: Any = None
) -> tuple[str, bool]:
    """(redacted JSON summary, whether anything was redacted) for a request body."""
    return summarize(parse_body(body, content_type=content_type, form=form, files=files))


def _group_pairs(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name, []).append(value)
    return {name: _one_or_many(values) for name, values in grouped.items()}


def _one_or_many(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values
