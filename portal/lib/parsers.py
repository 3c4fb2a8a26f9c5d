"""DRF's body parsers, answering what a caller sent wrong with a 4xx instead of a 500.

DRF turns a ``ValueError`` from ``json.load`` into a 400, but ``json.load`` raises
``RecursionError`` on JSON nested about a thousand levels deep; JSON's escapes can spell half a
UTF-16 pair (``"\\ud800"``), which no UTF-8 answer can echo and no database text can hold, so a
body holding one, in a key or a value, is refused whole; and Django's form parsing
raises ``SuspiciousOperation`` subclasses (too many fields or files, too large a body) that DRF
passes on, which Django answers with its HTML 400 page instead of the API's error shape.
Wired in ``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``.
"""

from __future__ import annotations

import re

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import parsers
from rest_framework.exceptions import APIException, ParseError, ValidationError

SURROGATE = re.compile("[\ud800-\udfff]")


class BodyTooLarge(APIException):
    status_code = 413
    default_code = "body_too_large"
    default_detail = "The request body is larger than the portal accepts."


def _refused(error: Exception) -> APIException:
    if isinstance(error, RequestDataTooBig):
        return BodyTooLarge()
    if isinstance(error, TooManyFilesSent):
        return ParseError("The form sends more files than the portal accepts.")
    return ParseError("The form sends more fields than the portal accepts.")


def _surrogate(text: str) -> str | None:
    """The first lone surrogate in text, if any. Python's JSON decoder pairs a high and a low
    escape into one character, so any surrogate left in a decoded string is a lone one. One
    character class: linear in the text, nothing to backtrack."""
    found = SURROGATE.search(text)
    return found.group() if found else None


def _escaped(text: str) -> str:
    """A field path as an answer can carry it: a surrogate in it shows as ``\\ud800``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def surrogate_refusal(data) -> ValidationError | None:
    """A 400 naming where the body holds a lone surrogate (in a key or a value), or None.

    Walked with a stack, not recursion: the decoder accepts nesting close to the interpreter's
    recursion limit."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, value = stack.pop()
        found = None
        if isinstance(value, str):
            found = _surrogate(value)
        elif isinstance(value, dict):
            for key, child in reversed(value.items()):
                name = f"{path}.{key}" if path else key
                if (found := _surrogate(key)) is not None:
                    path = name
                    break
                stack.append((name, child))
        elif isinstance(value, list):
            stack.extend(
                (f"{path}.{index}" if path else str(index), child)
                for index, child in reversed(list(enumerate(value)))
            )
        if found is not None:
            message = f"Surrogate characters are not allowed: U+{ord(found):X}."
            return ValidationError(
                {_escaped(path) or "non_field_errors": [message]},
                code="surrogate_characters_not_allowed",
            )
    return None


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                "JSON parse error - nested too deeply; send a flatter document."
            ) from None
        refusal = surrogate_refusal(data)
        if refusal is not None:
            raise refusal
        return data


class FormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except (TooManyFieldsSent, RequestDataTooBig) as error:
            raise _refused(error) from None


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except (TooManyFieldsSent, TooManyFilesSent, RequestDataTooBig) as error:
            raise _refused(error) from None
