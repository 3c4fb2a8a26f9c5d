"""DRF's body parsers, answering what a caller sent wrong with a 4xx instead of a 500.

DRF turns a ``ValueError`` from ``json.load`` into a 400, but ``json.load`` raises
``RecursionError`` on JSON nested about a thousand levels deep; and Django's form parsing
raises ``SuspiciousOperation`` subclasses (too many fields or files, too large a body) that DRF
passes on, which Django answers with its HTML 400 page instead of the API's error shape.
Wired in ``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``.
"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import parsers
from rest_framework.exceptions import APIException, ParseError


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


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                "JSON parse error - nested too deeply; send a flatter document."
            ) from None


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
