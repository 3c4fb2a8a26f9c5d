"""What the audit log (and the log files) must never hold, and how it is taken out.

Secrets are found two ways, because neither alone is enough: by the *name* they travel under
(``password``, ``api_key``, ``Authorization``, ``client_secret`` ...), and by what the *value*
looks like (an AWS access key id, a PEM private key, ``Bearer ...``, a JWT, a long random
string), so that a secret pasted into an innocent field such as ``description`` or ``next`` is
caught too. Redaction happens before anything is written; there is no "redact on display".

Stored text is also made safe to show: control characters, ANSI escape sequences, bidi overrides
and lone surrogates are written out as ``\\x1b``-style escapes, so a crafted user agent cannot
rewrite a terminal or reorder what an admin reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

REDACTED = "[REDACTED]"

# The secrets the current request carries (values under secret names in its query, headers
# and body), so that they are scrubbed wherever else they turn up: an exception message that
# quotes the input, a log line, a path. Set by the audit middleware for each request.
request_secrets: ContextVar[tuple[str, ...]] = ContextVar("portal_request_secrets", default=())
# Shorter values are too likely to be ordinary words to replace everywhere.
MIN_SECRET = 4

# Key names, compared after lower-casing and dropping everything but letters and digits, so
# "X-Api-Key", "api_key" and "apiKey" are one name. Substrings for the unmistakable words,
# whole names for the short ones that also occur inside harmless words ("pin" in "spinner").
_SECRET_KEY_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "signingkey",
    "encryptionkey",
    "credential",
    "authorization",
    "authentication",
    "cookie",
    "sessionid",
    "csrf",
    "signature",
    "awssecret",
    "bearer",
)
_SECRET_KEY_NAMES = frozenset(
    {"auth", "pass", "pwd", "pin", "otp", "key", "session", "jwt", "sig", "mfa", "totp"}
)
_KEY_CLEAN = re.compile(r"[^a-z0-9]")

# Values that are secrets whatever they are called. Order matters: the private key block is
# taken out whole before the shorter patterns could cut it into pieces.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----.*?"
    r"(-----END[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----|\Z)",
    re.DOTALL,
)
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)")
_AUTH_SCHEME = re.compile(
    r"(?i)\b(?P<scheme>bearer|basic|token|apikey)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/:-]{8,}=*)"
)
# name=value and "name": "value" pairs inside free text, for names that say "secret".
_SECRET_PAIR = re.compile(
    r"(?i)(?P<head>(?P<quote>[\"']?)"
    r"[a-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|credential|authorization|session[_-]?id|csrf[a-z_]*|signature)"
    r"[a-z0-9_.-]*(?P=quote)\s*(?:=|:)\s*)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"'&,;}]+)"
)
_VALUE_PATTERNS = (
    # AWS access key ids (long-term AKIA, temporary ASIA, and the other id prefixes).
    re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b"),
    # JSON web tokens.
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    # Provider tokens with a recognisable prefix: GitHub, GitLab, Slack, Stripe, OpenAI-style,
    # Google API keys.
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}"),
    # The portal's own API tokens (portal.services.TOKEN_PREFIX).
    re.compile(r"\bgpp_[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
)
# A long run of letters, digits and base64 punctuation mixing upper case, lower case and digits
# is what generated secrets look like (AWS secret access keys, random API keys). UUIDs and hex
# digests are lower case and stay readable.
_RANDOM_RUN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
# SSH *public* keys are long base64 runs too, and are not secret: keep them readable.
_SSH_PUBLIC_KEY = re.compile(
    r"\b(?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)\s+AAAA[A-Za-z0-9+/=]+"
)

# One quick look for anything the patterns above could match; most text (paths, user agents,
# view names) has none of it and is returned as it is without running each pattern.
_MAYBE_SECRET = re.compile(
    r"(?i)-----BEGIN|://|bearer|basic|token|apikey|passw|passphrase|secret|api[_-]?key|"
    r"access[_-]?key|private[_-]?key|credential|authorization|session|csrf|signature|"
    r"AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA|eyJ|gh[pousr]_|github_pat_|"
    r"glpat-|gpp_|xox[abprs]-|(?:sk|rk|pk)_(?:live|test)_|sk-|AIza|[A-Za-z0-9+/=_-]{32,}"
)

_ESCAPE_CATEGORIES = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

MAX_TEXT = 512
MAX_ITEMS = 50
MAX_DEPTH = 6
MAX_SUMMARY = 8192


def is_secret_key(name: Any) -> bool:
    """True when a field, parameter or header of this name carries a secret."""
    key = _KEY_CLEAN.sub("", str(name).lower())
    if not key:
        return False
    if key in _SECRET_KEY_NAMES or key.removeprefix("x").removeprefix("http") in _SECRET_KEY_NAMES:
        return True
    return any(part in key for part in _SECRET_KEY_PARTS)


def _looks_random(run: str) -> bool:
    return (
        any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
    )


def _redact_random_runs(text: str) -> str:
    protected = [match.span() for match in _SSH_PUBLIC_KEY.finditer(text)]

    def replace(match: re.Match) -> str:
        start, end = match.span()
        if any(lo <= start and end <= hi for lo, hi in protected):
            return match.group(0)
        return REDACTED if _looks_random(match.group(0)) else match.group(0)

    return _RANDOM_RUN.sub(replace, text)


def _redact_credential(match: re.Match) -> str:
    value = match.group("value")
    # "Bearer 3f9a..." is a credential; "basic configuration" is English.
    if any(c.isdigit() for c in value) or len(value) >= 20 or any(c in "+/=._~-" for c in value):
        return match.group("scheme") + match.group("sep") + REDACTED
    return match.group(0)


def _redact_pair(match: re.Match) -> str:
    value = match.group("value")
    quote_char = value[0] if value[0] in "\"'" else ""
    return f"{match.group('head')}{quote_char}{REDACTED}{quote_char}"


def redact_text(text: str) -> str:
    """The text with every secret-looking value replaced by ``[REDACTED]``."""
    if not text:
        return text
    for secret in request_secrets.get():
        if secret in text:
            text = text.replace(secret, REDACTED)
    if not _MAYBE_SECRET.search(text):
        return text
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group("head") + REDACTED, text)
    text = _AUTH_SCHEME.sub(_redact_credential, text)
    text = _SECRET_PAIR.sub(_redact_pair, text)
    for pattern in _VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _redact_random_runs(text)


def redact_identifier(text: str) -> str:
    """Like :func:`redact_text` for names of things (``token:42``, ``api-key:7``): a secret's
    shape is still caught, but a ``name:value`` pair is an identifier here, not a credential."""
    if not text:
        return text
    for secret in request_secrets.get():
        if secret in text:
            text = text.replace(secret, REDACTED)
    if not _MAYBE_SECRET.search(text):
        return text
    text = _PRIVATE_KEY.sub(REDACTED, text)
    for pattern in _VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _redact_random_runs(text)


def clean_identifier(text: str, limit: int = 255) -> str:
    text = escape_control(redact_identifier(text))
    return text if len(text) <= limit else f"{text[: limit - 12]}…(+{len(text) - limit + 12})"


def escape_control(text: str) -> str:
    """Control characters, ANSI escapes, bidi overrides and lone surrogates as visible escapes."""
    if not text or not _ESCAPE_CATEGORIES.search(text):
        return text

    def escape(match: re.Match) -> str:
        code = ord(match.group(0))
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _ESCAPE_CATEGORIES.sub(escape, text)


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """Redacted, escaped and cut to ``limit`` characters: fit for the audit table."""
    if not request_secrets.get() and len(text) <= MAX_TEXT:
        # The same user agents, routes and view names come back on every request.
        return _clean_text_cached(text, limit)
    return _clean_text(text, limit)


def _clean_text(text: str, limit: int) -> str:
    text = escape_control(redact_text(text))
    if len(text) > limit:
        text = f"{text[: limit - 12]}…(+{len(text) - limit + 12})"
    return text


_clean_text_cached = lru_cache(maxsize=4096)(_clean_text)


def redact_data(value: Any, *, key: Any = None, depth: int = 0) -> Any:
    """A JSON-like structure with secrets redacted by key name and by value, cut to size.

    Strings, numbers, booleans and None come out as they are (numbers as int or their string
    form, so a stored summary never depends on float formatting); anything else by its type.
    """
    if key is not None and is_secret_key(key):
        return REDACTED
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return clean_text(value)
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for index, (name, item) in enumerate(value.items()):
            if index >= MAX_ITEMS:
                out["…"] = f"+{len(value) - MAX_ITEMS} more keys"
                break
            out[clean_text(str(name), 128)] = redact_data(item, key=name, depth=depth + 1)
        return out
    if isinstance(value, list | tuple):
        items = [redact_data(item, key=key, depth=depth + 1) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… +{len(value) - MAX_ITEMS} more items")
        return items
    return f"<{type(value).__name__}>"


def _pairs_redacted(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (clean_text(name, 128), REDACTED if is_secret_key(name) else clean_text(value, 256))
        for name, value in pairs
    ]


def redact_query(query_string: str) -> str:
    """A query string with secret parameters redacted, still readable as a query string."""
    if not query_string:
        return ""
    pairs = parse_qsl(query_string, keep_blank_values=True)
    text = urlencode(_pairs_redacted(pairs), quote_via=quote, safe="/:,[]@*$!'()")
    return text[:2048]


def canonical_json(value: Any) -> str:
    """One spelling for one structure: sorted keys, no spaces, no float formatting surprises."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ParsedBody:
    """A request body as the audit log sees it: its structure (JSON or form fields), or a note
    saying what it was, and whether its raw text looked like it held a secret."""

    data: Any = None
    note: dict[str, Any] | None = None
    suspicious: bool = False


def parse_body(body: bytes, *, content_type: str, form: Any = None, files: Any = None):
    """Parse a body once, before the view runs: JSON and form bodies keep their structure,
    multipart forms list their files by name and size, anything else is described by type."""
    content_type = (content_type or "").split(";")[0].strip().lower()
    if not body:
        return ParsedBody()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return ParsedBody(data=json.loads(body.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            text = body.decode("utf-8", "replace")
            return ParsedBody(
                note={"_unparsed": f"{len(body)} bytes of invalid JSON"},
                suspicious=redact_text(text) != text,
            )
    if content_type == "application/x-www-form-urlencoded":
        pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        return ParsedBody(data=_group_pairs(pairs))
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


def secret_values(value: Any, *, key: Any = None, depth: int = 0) -> list[str]:
    """Every value that travels under a secret name, however deep, as text."""
    if depth > MAX_DEPTH * 2:
        return []
    if isinstance(value, dict):
        found: list[str] = []
        for name, item in value.items():
            found += secret_values(item, key=name, depth=depth + 1)
        return found
    if isinstance(value, list | tuple):
        found = []
        for item in value:
            found += secret_values(item, key=key, depth=depth + 1)
        return found
    if key is not None and is_secret_key(key) and value is not None and value != "":
        return [str(value)]
    return []


def _group_pairs(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name, []).append(value)
    return {name: _one_or_many(values) for name, values in grouped.items()}


def _one_or_many(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values


def _contains_redaction(value: Any) -> bool:
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(_contains_redaction(item) for item in value.values())
    if isinstance(value, list):
        return any(_contains_redaction(item) for item in value)
    return False
