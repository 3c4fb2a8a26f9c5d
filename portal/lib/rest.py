"""API plumbing shared by every app: paging, lookups and the error shape.

Every error a caller can cause answers ``{"code": ..., "detail": ..., "fields": {...}}``:
a machine-readable code, one sentence saying what to change, and per-field messages when the
input had fields. The body is bounded whatever the input: at most ``MAX_ERROR_FIELDS`` fields
are listed, names and messages are cut to a fixed length, and ``omitted_fields`` says how many
were left out (a 79 KB body of unknown keys once drew a 1.6 MB answer).
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.http import Http404
from rest_framework import exceptions, serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from rest_framework.views import exception_handler as drf_exception_handler

from portal.lib.errors import PortalError

MAX_ERROR_FIELDS = 20
MAX_FIELD_NAME = 100
MAX_MESSAGE = 300
MAX_DETAIL = 2000

NUL = "\x00"


def empty_is_none(parameter: dict) -> dict:
    """An optional query parameter sent empty (``?page=``, as the pages' forms send blank fields)
    is the same as none: documented as ``allowEmptyValue`` beside the value's own schema, so a
    generated client sees one plain optional parameter, not a union with an empty-string type."""
    return {**parameter, "allowEmptyValue": True}


NUL_MESSAGE = "Null characters are not allowed."


def has_nul(value) -> bool:
    return isinstance(value, str) and NUL in value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def shown_name(name: str) -> str:
    """A field name as an error may repeat it: printable (a NUL shows as \\x00) and short."""
    return _cut(str(name).replace(NUL, "\\x00"), MAX_FIELD_NAME)


def error_body(code: str, fields: dict[str, list[str]], detail: str | None = None) -> dict:
    """The error shape for per-field problems, bounded in size whatever the input."""
    names = list(fields)
    kept: dict[str, list[str]] = {}
    for name in names[:MAX_ERROR_FIELDS]:
        kept[shown_name(name)] = [_cut(str(message), MAX_MESSAGE) for message in fields[name][:3]]
    omitted = len(names) - len(kept)
    if detail is None:
        sentences = [
            " ".join(messages) if name == "non_field_errors" else f"{name}: {' '.join(messages)}"
            for name, messages in kept.items()
        ]
        detail = " ".join(sentences)
    if omitted:
        detail = f"{_cut(detail, MAX_DETAIL)} ({omitted} more fields not shown.)"
    body = {"code": code, "detail": _cut(detail, MAX_DETAIL + 40), "fields": kept}
    if omitted:
        body["omitted_fields"] = omitted
    return body


def nul_error_body(fields: list[str]) -> dict:
    # The code DRF's own CharField gives the same refusal.
    return error_body("null_characters_not_allowed", {name: [NUL_MESSAGE] for name in fields})


class ErrorSerializer(serializers.Serializer):
    """What every 4xx answers (documented on every operation of the schema)."""

    code = serializers.CharField(help_text="Machine-readable, e.g. invalid, not_found, conflict")
    detail = serializers.CharField(help_text="One sentence saying what to change")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text=f"Messages per field (at most {MAX_ERROR_FIELDS} fields)",
    )
    omitted_fields = serializers.IntegerField(
        required=False, help_text="How many more fields had problems than are listed"
    )


# The highest page number anyone may ask for (any page past the last answers 404).
LAST_PAGE = 10**18 - 1


class Pagination(PageNumberPagination):
    """Pages of 50 (``page_size`` up to 500). A page or size that is not a whole number in range
    answers 400; a page past the last one answers 404."""

    page_size_query_param = "page_size"
    max_page_size = 500
    # Only numbers: "last" is not something the schema can promise alongside an integer.
    last_page_strings = ()

    def _whole(self, request, name: str, high: int | None = None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        text = raw.strip()
        high = high or LAST_PAGE
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else 0
        if not 1 <= value <= high:
            limit = f"from 1 to {high}"
            raise exceptions.ValidationError(
                {name: [f"{shown_name(raw)} is not a whole number {limit}."]}, code="invalid"
            )
        return value

    def get_page_size(self, request):
        size = self._whole(request, self.page_size_query_param, self.max_page_size)
        return size or self.page_size

    def get_page_number(self, request, paginator):
        return self._whole(request, self.page_query_param) or 1

    def get_schema_operation_parameters(self, view):
        return [
            empty_is_none(
                {
                    "name": self.page_query_param,
                    "required": False,
                    "in": "query",
                    "description": "A page number (1 is the first); past the last page: 404.",
                    "schema": {"type": "integer", "minimum": 1, "maximum": LAST_PAGE},
                }
            ),
            empty_is_none(
                {
                    "name": self.page_size_query_param,
                    "required": False,
                    "in": "query",
                    "description": (
                        f"Results per page (default {self.page_size}, at most "
                        f"{self.max_page_size}; a larger page_size answers 400, it is not cut "
                        f"down)."
                    ),
                    "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
                }
            ),
        ]


class RejectUnknownFields:
    """Input as a write serializer takes it, strictly: a field it does not know is refused,
    so a caller cannot set owner, status or prices, nor lose a misspelt field without a word;
    and a yes/no field takes only true or false (DRF's BooleanField also takes 0, 1, "yes",
    "on"). The schema says so too (``additionalProperties: false``, see portal.lib.schema). Mixed
    into StrictSerializer and StrictModelSerializer, the bases every write serializer uses."""

    rejects_unknown_fields = True
    # DRF's own query parameters are not fields.
    ignored = frozenset({"format"})

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields) - self.ignored)
            if unknown:
                names = ", ".join(sorted(n for n, f in self.fields.items() if not f.read_only))
                accepts = f"this endpoint accepts {names}." if names else "send no body."
                raise serializers.ValidationError(
                    {name: [f"{shown_name(name)} cannot be set; {accepts}"] for name in unknown},
                    code="unknown_field",
                )
            html = hasattr(data, "getlist")  # a form sends text: "true" or "false"
            wrong = {
                name: [f"{name} is true or false."]
                for name, field in self.fields.items()
                if isinstance(field, serializers.BooleanField)
                and not field.read_only
                and name in data
                and not _yes_no(data[name], html=html, allow_null=field.allow_null)
            }
            if wrong:
                raise serializers.ValidationError(wrong, code="invalid")
        return super().to_internal_value(data)


def _yes_no(value, *, html: bool, allow_null: bool) -> bool:
    if value is None:
        return allow_null
    return value in ("true", "false") if html else isinstance(value, bool)


class StrictSerializer(RejectUnknownFields, serializers.Serializer):
    """The base of every write serializer that is not a model's (see RejectUnknownFields)."""


class StrictModelSerializer(RejectUnknownFields, serializers.ModelSerializer):
    """A model serializer that reads and writes: read-only fields sent back (a GET body PUT
    again) are ignored as DRF ignores them; unknown fields are refused."""


class NoBody(StrictSerializer):
    """What an action that takes no input accepts: no body, or an empty object."""


def refuse_body(request) -> None:
    """An action that takes no input refuses one (400 ``unknown_field``) rather than drop
    what the caller meant it to do."""
    NoBody(data=request.data).is_valid(raise_exception=True)


class BoundedDictField(serializers.DictField):
    """A mapping of at most ``max_length`` keys (DRF's DictField takes any number); the schema
    says ``maxProperties`` (portal.lib.schema)."""

    def __init__(self, *, max_length: int, **kwargs):
        self.max_length = max_length
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, dict) and len(data) > self.max_length:
            raise serializers.ValidationError(
                f"Give at most {self.max_length} entries.", code="max_length"
            )
        return super().to_internal_value(data)


class LookupField(serializers.SlugRelatedField):
    """A reference by name or slug. Text PostgreSQL cannot compare (a NUL byte, a lone UTF-16
    surrogate from a JSON escape) is refused before the lookup, as DRF's CharField refuses it."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            for validator in (
                ProhibitNullCharactersValidator(),
                ProhibitSurrogateCharactersValidator(),
            ):
                validator(data)
        return super().to_internal_value(data)


def _first_code(codes) -> str:
    if isinstance(codes, dict):
        for value in codes.values():
            return _first_code(value)
    if isinstance(codes, list) and codes:
        return _first_code(codes[0])
    return codes if isinstance(codes, str) else "invalid"


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    """Field path -> messages, e.g. {'ssh_public_key': ['...']} or {'items.0.count': [...]}."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]}
        out = {}
        for index, item in enumerate(detail):
            out.update(_flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return out
    return {prefix or "non_field_errors": [str(detail)]}


def exception_handler(exc, context):
    if isinstance(exc, PortalError):
        body = {"code": exc.code, "detail": _cut(exc.message, MAX_DETAIL)}
        if exc.field:
            body["fields"] = {shown_name(exc.field): [_cut(exc.message, MAX_MESSAGE)]}
        return Response(body, status=exc.status)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(detail=as_serializer_error(exc))
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body(_first_code(exc.get_codes()), _flatten(exc.detail))
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = _first_code(exc.get_codes()) if isinstance(exc, exceptions.APIException) else ""
        response.data = {"code": code or "error", "detail": _cut(str(detail), MAX_DETAIL)}
    return response


YES_NO = [("true", "yes"), ("false", "no"), ("1", "yes"), ("0", "no")]


class YesNoFilter(django_filters.ChoiceFilter):
    """A yes/no filter that refuses anything but true, false, 1 or 0 (django-filter's own
    BooleanFilter treats any other word as no filter at all)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("choices", YES_NO)
        kwargs.setdefault("empty_label", None)
        super().__init__(*args, **kwargs)
        self.extra.setdefault(
            "error_messages",
            {"invalid_choice": "%(value)s is not a yes/no value; give true or false."},
        )

    def filter(self, qs, value):
        if value in ("", None):
            return qs
        return super().filter(qs, value in ("true", "1"))
