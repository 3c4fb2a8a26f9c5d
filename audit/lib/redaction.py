"""What the audit log (and the log files) must never hold, and how it is taken out.

Secrets are found two ways, because neither alone is enough: by the *name* they travel under
(``password``, ``api_key``, ``Authorization``, ``client_secret`` ...), and by what the *value*
looks like (an AWS access key id, a PEM private key, ``Bearer ...``, a JWT, a long random
string), so that a secret pasted into an innocent field such as ``description`` or ``next`` is
caught too. Redaction happens before anything is written; there is no "redact on display".

It runs on what anonymous callers send (path, query, user agent, body) before they are
authenticated, so its cost must not depend on what they send beyond its length:

* every pattern runs on RE2 (``google-re2``), whose matching time is linear in the text: no
  input makes it backtrack, as Python's ``re`` did (16 KB of one letter held the interpreter
  for 9-28 s, and every other request with it);
* the patterns read at most a bounded prefix of any one text (``SCAN_LIMIT``, less for a field
  that stores less), and what comes after it is never stored or logged: the text is cut there
  and says how much was not scanned;
* the values a request carried under secret names are taken out of the whole text, by plain
  substring search, and only the first ``MAX_CARRIED_SECRETS`` of them;
* a body's summary reads at most ``SUMMARY_SCAN_LIMIT`` characters of its strings in all.

Stored text is also made safe to show: control characters, ANSI escape sequences, bidi overrides
and lone surrogates are written out as ``\\x1b``-style escapes, so a crafted user agent cannot
rewrite a terminal or reorder what an admin reads.
"""

from __future__ import annotations

import json
import re
from contextvars import ContextVar
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import re2

REDACTED = "[REDACTED]"

# The secrets the current request carries (values under secret names in its query, headers
# and body), so that they are scrubbed wherever else they turn up: an exception message that
# quotes the input, a log line, a path. Set by the audit middleware for each request.
request_secrets: ContextVar[tuple[str, ...]] = ContextVar("portal_request_secrets", default=())
# Shorter values are too likely to be ordinary words to replace everywhere.
MIN_SECRET = 4
# Each carried secret costs one substring search of every text redacted while the request
# runs; a body with thousands of password fields must not multiply that.
MAX_CARRIED_SECRETS = 64

# Characters of one text the patterns read. A log record is cut here; stored fields read less
# (see _scan_limit_for). RE2 reads about 10-100 MB/s here, so this costs a few ms at most.
SCAN_LIMIT = 32 * 1024
# Characters of a body's strings (keys included) that its summary reads, in all: the summary
# stores at most MAX_SUMMARY characters, so reading more would be spent on text never kept.
SUMMARY_SCAN_LIMIT = 32 * 1024
# When a text is cut, the cut moves back to the last separator within this many characters,
# so that a secret is never cut in two (its first half would slip past the pattern for its
# shape). A token longer than this is judged on what the patterns see of it.
_TOKEN_REACH = 256
_SEPARATORS = frozenset(" \t\r\n\f\v\"'&,;:=<>()[]{}|\\")

# Stands in for each character of a carried secret until the text is cut (see _scrub_carried).
# U+FFFF is a noncharacter, which no text should hold; one that does sees it redacted.
_MASK = "\uffff"
_MASK_RUN = re.compile("\uffff+")

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
# One character class, no repetition to backtrack over: linear on Python's re as well.
_KEY_CLEAN = re.compile(r"[^a-z0-9]")

# Values that are secrets whatever they are called. Order matters: the private key block is
# taken out whole before the shorter patterns could cut it into pieces; a block whose END line
# is missing (or was cut off) is taken out to the end of the text.
_PRIVATE_KEY = re2.compile(
    r"(?s)-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\z)"
)
_URL_CREDENTIALS = re2.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@")
_AUTH_SCHEME = re2.compile(
    r"(?i)\b(?P<scheme>bearer|basic|token|apikey)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/:-]{8,}=*)"
)
# name=value and "name": "value" pairs inside free text, for names that say "secret". RE2 has
# no backreference to insist that the closing quote match the opening one; accepting either
# quote on either side only redacts a little more. A quoted value whose closing quote never
# comes (or was cut off) is redacted to the end of the text.
_SECRET_PAIR = re2.compile(
    r"(?i)(?P<head>[\"']?"
    r"[a-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|credential|authorization|session[_-]?id|csrf[a-z_]*|signature)"
    r"[a-z0-9_.-]*[\"']?\s*[=:]\s*)"
    r"(?P<value>\"[^\"]*(?:\"|\z)|'[^']*(?:'|\z)|[^\s\"'&,;}]+)"
)
_SHAPED_SECRET = re2.compile(
    "|".join(
        [
            # AWS access key ids (long-term AKIA, temporary ASIA, and the other id prefixes).
            r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b",
            # JSON web tokens.
            r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
            # Provider tokens with a recognisable prefix: GitHub, GitLab, the portal's own API
            # tokens (portal.services.TOKEN_PREFIX), Slack, Stripe, OpenAI-style, Google keys.
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
            r"\bglpat-[A-Za-z0-9_-]{16,}",
            r"\bgpp_[A-Za-z0-9_-]{16,}",
            r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}",
            r"\bsk-[A-Za-z0-9_-]{20,}",
            r"\bAIza[0-9A-Za-z_-]{35}\b",
        ]
    )
)
# A long run of letters, digits and base64 punctuation mixing upper case, lower case and digits
# is what generated secrets look like (AWS secret access keys, random API keys). UUIDs and hex
# digests are lower case and stay readable, and so do SSH *public* keys, which are long base64
# runs too but not secret: the first alternative matches them whole, and they are kept.
_RANDOM_RUN = re2.compile(
    r"(?P<ssh>\b(?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp[0-9]+|sk-ssh-ed25519@openssh\.com)"
    r"\s+AAAA[A-Za-z0-9+/=]+)|[A-Za-z0-9+/=_-]{32,}"
)

# One quick look for anything the patterns above could match; most text (paths, user agents,
# view names) has none of it and is returned as it is without running each pattern.
_MAYBE_SECRET = re2.compile(
    r"(?i)-----BEGIN|://|bearer|basic|token|apikey|passw|passphrase|secret|api[_-]?key|"
    r"access[_-]?key|private[_-]?key|credential|authorization|session|csrf|signature|"
    r"AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA|eyJ|gh[pousr]_|github_pat_|"
    r"glpat-|gpp_|xox[abprs]-|(?:sk|rk|pk)_(?:live|test)_|sk-|AIza|[A-Za-z0-9+/=_-]{32,}"
)

# What escape_control writes out. Python's re, not RE2, finds them, because RE2 reads UTF-8 and
# a lone surrogate has none; a single character class cannot backtrack, and str.translate
# rewrites them in one pass.
_ESCAPED_CODES = [
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    *range(0xD800, 0xE000),
]
_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _ESCAPED_CODES}
_SURROGATE_ESCAPES = {code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)}
_NEEDS_ESCAPE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_DIGITS = b"0123456789"
_CREDENTIAL_MARKS = b"0123456789+/=._~-"

MAX_TEXT = 512
MAX_ITEMS = 50
MAX_DEPTH = 6
MAX_SUMMARY = 8192
# Fields of a form body read for its summary; Django refuses a form with more than
# DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000 by default) anyway, once a view reads it.
MAX_FORM_FIELDS = 1000


def is_secret_key(name: Any) -> bool:
    """True when a field, parameter or header of this name carries a secret."""
    key = _KEY_CLEAN.sub("", str(name).lower())
    if not key:
        return False
    if key in _SECRET_KEY_NAMES or key.removeprefix("x").removeprefix("http") in _SECRET_KEY_NAMES:
        return True
    return any(part in key for part in _SECRET_KEY_PARTS)


# The patterns run on the text's UTF-8 bytes: the RE2 bindings, given a str, convert every match
# position back to characters, which costs several times the match itself.
_REDACTED_BYTES = REDACTED.encode()


def _redact_random_run(match) -> bytes:
    run = match.group(0)
    if match.group("ssh") or not _looks_random(run):
        return run
    return _REDACTED_BYTES


def _looks_random(run: bytes) -> bool:
    return run != run.lower() and run != run.upper() and any(d in run for d in _DIGITS)


def _redact_credential(match) -> bytes:
    value = match.group("value")
    # "Bearer 3f9a..." is a credential; "basic configuration" is English.
    if len(value) >= 20 or any(c in value for c in _CREDENTIAL_MARKS):
        return match.group("scheme") + match.group("sep") + _REDACTED_BYTES
    return match.group(0)


def _redact_pair(match) -> bytes:
    value = match.group("value")
    quote_char = value[:1] if value[:1] in (b'"', b"'") else b""
    return match.group("head") + quote_char + _REDACTED_BYTES + quote_char


def _redact_url_credentials(match) -> bytes:
    return match.group("head") + _REDACTED_BYTES + b"@"


def _redact_whole(_match) -> bytes:
    return _REDACTED_BYTES


def _scrub_carried(text: str, end: int) -> str:
    """The first ``end`` characters of ``text``, with every carried secret that starts among
    them replaced: all of it, also where it runs on past ``end``.

    Each secret is looked for only as far as it could reach from inside the cut, so the cost
    does not grow with the text. Its characters are first masked one for one, so that the
    cut falls where it would have without them."""
    secrets = request_secrets.get()
    if not secrets:
        return text[:end]
    region = text[: end + max(map(len, secrets))]
    for secret in secrets:
        reach = end + len(secret) - 1
        if region.find(secret, 0, reach) != -1:
            region = region[:reach].replace(secret, _MASK * len(secret)) + region[reach:]
    head = region[:end]
    return _MASK_RUN.sub(REDACTED, head) if _MASK in head else head


def _scan_end(text: str, limit: int) -> int:
    """Where the part of ``text`` that the patterns read ends."""
    if len(text) <= limit:
        return len(text)
    for index in range(limit - 1, max(limit - _TOKEN_REACH, 0) - 1, -1):
        if text[index] in _SEPARATORS:
            return index + 1
    return limit


def _scan_window(text: str, limit: int) -> tuple[str, int]:
    """(the part of ``text`` the patterns read, how many characters after it they do not)."""
    end = _scan_end(text, limit)
    return text[:end], len(text) - end


def _utf8(text: str) -> tuple[str, bytes]:
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (JSON's "\ud800") has no UTF-8 form; it is written out as the escape
        # escape_control would have made of it anyway.
        text = text.translate(_SURROGATE_ESCAPES)
        return text, text.encode("utf-8")


def _redact_shapes(text: str, *, free_text: bool) -> str:
    """Every pattern over ``text``, in linear time. ``free_text`` adds the patterns that read
    ``name=value`` and ``scheme value`` as credentials, which identifiers are not."""
    text, data = _utf8(text)
    if not _MAYBE_SECRET.search(data):
        return text
    data = _PRIVATE_KEY.sub(_redact_whole, data)
    if free_text:
        data = _URL_CREDENTIALS.sub(_redact_url_credentials, data)
        data = _AUTH_SCHEME.sub(_redact_credential, data)
        data = _SECRET_PAIR.sub(_redact_pair, data)
    data = _SHAPED_SECRET.sub(_redact_whole, data)
    return _RANDOM_RUN.sub(_redact_random_run, data).decode("utf-8")


def _redacted(text: str, *, limit: int, free_text: bool) -> str:
    if not text:
        return text
    end = _scan_end(text, limit)
    head = _redact_shapes(_scrub_carried(text, end), free_text=free_text)
    rest = len(text) - end
    return f"{head}…(+{rest} not scanned)" if rest else head


def redact_text(text: str, *, limit: int = SCAN_LIMIT) -> str:
    """The text with every secret-looking value replaced by ``[REDACTED]``.

    Only its first ``limit`` characters are read; a longer text is cut there and ends with
    ``…(+N not scanned)``.
    """
    return _redacted(text, limit=limit, free_text=True)


def redact_identifier(text: str, *, limit: int = SCAN_LIMIT) -> str:
    """Like :func:`redact_text` for names of things (``token:42``, ``api-key:7``): a secret's
    shape is still caught, but a ``name:value`` pair is an identifier here, not a credential."""
    return _redacted(text, limit=limit, free_text=False)


def _scan_limit_for(limit: int) -> int:
    # A stored field keeps `limit` characters; reading several times that leaves room for what
    # redaction shortens, and no more.
    return min(SCAN_LIMIT, max(8 * limit, 1024))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 12]}…(+{len(text) - limit + 12})"


def clean_identifier(text: str, limit: int = 255) -> str:
    return _cut(escape_control(redact_identifier(text, limit=_scan_limit_for(limit))), limit)


def escape_control(text: str, *, limit: int = SCAN_LIMIT) -> str:
    """Control characters, ANSI escapes, bidi overrides and lone surrogates as visible escapes.

    Only the first ``limit`` characters are read; a longer text is cut there and says so."""
    if len(text) > limit:
        rest = len(text) - limit
        return f"{escape_control(text[:limit])}…(+{rest} not scanned)"
    if not text or not _NEEDS_ESCAPE.search(text):
        return text
    return text.translate(_ESCAPES)


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """Redacted, escaped and cut to ``limit`` characters: fit for the audit table."""
    if not request_secrets.get() and len(text) <= MAX_TEXT:
        # The same user agents, routes and view names come back on every request.
        return _clean_text_cached(text, limit)
    return _clean_text(text, limit)


def _clean_text(text: str, limit: int) -> str:
    return _cut(escape_control(redact_text(text, limit=_scan_limit_for(limit))), limit)


_clean_text_cached = lru_cache(maxsize=4096)(_clean_text)


class _Budget:
    """Characters a summary may still read; once spent, the rest of the body is not read."""

    def __init__(self, chars: int):
        self.chars = chars

    def spend(self, text: str, limit: int) -> str | None:
        if self.chars <= 0:
            return None
        self.chars -= min(len(text), _scan_limit_for(limit))
        return clean_text(text, limit)


NOT_SCANNED = "…(not scanned)"


def redact_data(value: Any, *, budget: int = SUMMARY_SCAN_LIMIT) -> Any:
    """A JSON-like structure with secrets redacted by key name and by value, cut to size.

    Strings, numbers, booleans and None come out as they are (numbers as int or their string
    form, so a stored summary never depends on float formatting); anything else by its type.
    At most ``budget`` characters of its strings are read; values after that come out as
    ``…(not scanned)``.
    """
    return _redact_node(value, None, 0, _Budget(budget))


def _redact_node(value: Any, key: Any, depth: int, budget: _Budget) -> Any:
    if key is not None and is_secret_key(key):
        return REDACTED
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        cleaned = budget.spend(value, MAX_TEXT)
        return NOT_SCANNED if cleaned is None else cleaned
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for index, (name, item) in enumerate(value.items()):
            if index >= MAX_ITEMS:
                out["…"] = f"+{len(value) - MAX_ITEMS} more keys"
                break
            cleaned = budget.spend(str(name), 128)
            if cleaned is None:
                out["…"] = f"+{len(value) - index} keys not scanned"
                break
            out[cleaned] = _redact_node(item, name, depth + 1, budget)
        return out
    if isinstance(value, list | tuple):
        items = [_redact_node(item, key, depth + 1, budget) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… +{len(value) - MAX_ITEMS} more items")
        return items
    return f"<{type(value).__name__}>"


# A query string is stored cut to this many characters; it is read only so far as can be kept.
MAX_QUERY = 2048


def redact_query(query_string: str) -> str:
    """A query string with secret parameters redacted, still readable as a query string."""
    if not query_string:
        return ""
    head, rest = _scan_window(query_string, 4 * MAX_QUERY)
    pairs = parse_qsl(head, keep_blank_values=True)
    kept: list[str] = []
    length = 0
    for name, value in pairs:
        pair = (
            clean_text(name, 128),
            REDACTED if is_secret_key(name) else clean_text(value, 256),
        )
        kept.append(urlencode([pair], quote_via=quote, safe="/:,[]@*$!'()"))
        length += len(kept[-1]) + 1
        if length > MAX_QUERY:  # the rest could not be stored anyway
            break
    text = "&".join(kept)
    if rest:
        text += f"…(+{rest} not scanned)"
    elif len(kept) < len(pairs):
        text += "&…"
    return _cut(text, MAX_QUERY)


def canonical_json(value: Any) -> str:
    """One spelling for one structure: sorted keys, no spaces, no float formatting surprises."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def secret_values(value: Any, *, limit: int = MAX_CARRIED_SECRETS) -> list[str]:
    """Values that travel under a secret name, however deep, as text: the first ``limit``."""
    found: list[str] = []
    _collect_secrets(value, None, 0, found, limit)
    return found


def _collect_secrets(value: Any, key: Any, depth: int, found: list[str], limit: int) -> None:
    if depth > MAX_DEPTH * 2 or len(found) >= limit:
        return
    if isinstance(value, dict):
        for name, item in value.items():
            _collect_secrets(item, name, depth + 1, found, limit)
            if len(found) >= limit:
                return
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_secrets(item, key, depth + 1, found, limit)
            if len(found) >= limit:
                return
    elif key is not None and value is not None and value != "" and is_secret_key(key):
        found.append(str(value))


def _contains_redaction(value: Any) -> bool:
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(_contains_redaction(item) for item in value.values())
    if isinstance(value, list):
        return any(_contains_redaction(item) for item in value)
    return False
