"""The OpenAPI schema says what the API answers and accepts, errors included.

Done here once, not per view, so a new view cannot forget:

- every operation documents the error answers any call can get (400, 401, 403, 404, 409, 429)
  with the one error body (``Error``);
- a request body that refuses unknown fields says ``additionalProperties: false``;
- a text field that refuses blanks says so with a pattern (it is trimmed first);
- a filter parameter is documented from the form field that checks it (type, bounds, choices,
  decimal places) as what a client sends: a yes/no filter is a boolean, a name from the catalog
  (an instance type, a GPU model) is a string the server checks (an enum would change with
  every catalog sync and break generated clients), and an empty parameter is no filter (the
  pages send empty fields), said once as ``allowEmptyValue`` rather than as a union type.

The property-based fuzz (tests/test_api_fuzz.py) holds the schema to what the API does.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from drf_spectacular.contrib.django_filters import DjangoFilterExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from portal.lib.rest import YES_NO, ErrorSerializer, empty_is_none

ERRORS = {
    "400": "The input is not valid; `fields` names what to change.",
    "401": "Not signed in: send a session cookie or `Authorization: Bearer <token>`.",
    "403": "Signed in, but not allowed to do this.",
    "404": "No such object, or not one the caller may see.",
    "409": "The state of things refuses it (quota, budget, a host's status).",
    # audit.lib.limits answers it for every path, before any view; the limits are read from
    # settings when the schema is generated.
    "414": "The path is longer than {path} characters or the query string longer than {query} "
    "(`uri_too_long`); send fewer or shorter parameters.",
    "429": "Too many requests or failed sign-ins; `Retry-After` says when to try again.",
}
# Text with something in it besides whitespace, and no NUL (which PostgreSQL cannot hold).
NOT_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"
NO_NUL = r"^[^\x00]*$"


class PortalAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for status, description in ERRORS.items():
            if status not in responses:
                error = self._get_response_for_code(ErrorSerializer, status, direction=direction)
                error["description"] = description.format(
                    path=settings.PORTAL_MAX_PATH_LENGTH, query=settings.PORTAL_MAX_QUERY_LENGTH
                )
                responses[status] = error
        return responses

    def _get_parameters(self):
        parameters = super()._get_parameters()
        for index, parameter in enumerate(parameters):
            schema = parameter.get("schema", {})
            if parameter.get("in") == "query" and "" in schema.get("enum", ()):
                # A declared parameter (OpenApiParameter) whose choices include "" for "no
                # choice": said as allowEmptyValue, so a client gets a plain enum of the choices.
                schema["enum"] = [value for value in schema["enum"] if value != ""]
                parameters[index] = empty_is_none(parameter)
        return parameters

    def _resolve_path_parameters(self, variables):
        parameters = super()._resolve_path_parameters(variables)
        for parameter in parameters:
            schema = parameter["schema"]
            # A NUL in the path answers 400 (portal.middleware.RejectNulMiddleware).
            if schema.get("pattern") == "^[^/]+$":
                schema["pattern"] = r"^[^/\x00]+$"
        return parameters

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "rejects_unknown_fields", False):
            schema["additionalProperties"] = False
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if isinstance(field, serializers.ListSerializer):
            # drf-spectacular leaves out a list of objects' bounds (a ListField's it gives).
            if field.max_length is not None:
                schema["maxItems"] = field.max_length
            if field.min_length is not None:
                schema["minItems"] = field.min_length
        if isinstance(field, serializers.DictField) and getattr(field, "max_length", None):
            schema["maxProperties"] = field.max_length
        if isinstance(field, serializers.DecimalField) and "pattern" in schema:
            # drf-spectacular's pattern also matches "", "." and "-" on a field that refuses
            # them; this one says what DRF takes: a digit at least, a sign only if allowed.
            schema["pattern"] = decimal_pattern(field)
        if (
            direction == "request"
            and type(field) is serializers.CharField
            and schema.get("type") == "string"
            and "pattern" not in schema
        ):
            blank_ok = field.allow_blank or not field.trim_whitespace
            schema["pattern"] = NO_NUL if blank_ok else NOT_BLANK
        return schema


# A name from the catalog (or any table): text the server checks against what exists now.
NAME = {"type": "string", "pattern": NO_NUL}


def form_field_schema(field: forms.Field, *, choices_read_when_asked: bool = False) -> dict | None:
    """The schema of one query value as the form field that checks it accepts it.

    Choices read from the database when asked (a ModelChoiceField, a callable) are the catalog:
    documented as a name, never as an enum of today's rows."""
    if isinstance(field, forms.ModelChoiceField) or choices_read_when_asked:
        return NAME
    if isinstance(field, forms.MultipleChoiceField | forms.ChoiceField):
        values = [str(value) for value, _ in field.choices if value != ""]
        if set(values) == {value for value, _ in YES_NO}:
            return {"type": "boolean"}
        return {"type": "string", "enum": values}
    if isinstance(field, forms.DecimalField):
        return {"type": "string", "pattern": decimal_pattern(field)}
    if isinstance(field, forms.IntegerField):
        schema: dict = {"type": "integer"}
        if field.min_value is not None:
            schema["minimum"] = field.min_value
        if field.max_value is not None:
            schema["maximum"] = field.max_value
        return schema
    if isinstance(field, forms.DateTimeField):
        return {"type": "string", "format": "date-time"}
    if isinstance(field, forms.UUIDField):
        return {"type": "string", "format": "uuid"}
    if isinstance(field, forms.CharField) and not isinstance(field, forms.ModelChoiceField):
        # A field with its own grammar says it as `schema_pattern`.
        schema = {"type": "string", "pattern": getattr(field, "schema_pattern", NO_NUL)}
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
        return schema
    return None


def decimal_pattern(field) -> str:
    """A form or serializer DecimalField's accepted text: digits within max_digits and
    decimal_places, a point, and a minus sign only where negative values are allowed."""
    places = field.decimal_places or 0
    whole = (field.max_digits - places) if field.max_digits is not None else None
    low = field.min_value
    if low is not None and low > 0 and places and whole:
        # More than zero: a non-zero whole part, or a fraction with a non-zero digit in it.
        fractions = "|".join(
            rf"0{{{zeros}}}[1-9]\d{{0,{places - zeros - 1}}}" for zeros in range(places)
        )
        return rf"^(?:[1-9]\d{{0,{whole - 1}}}(?:\.\d{{0,{places}}})?|0?\.(?:{fractions}))$"
    digits = rf"\d{{1,{whole}}}" if whole else r"\d+"
    number = rf"{digits}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}}" if places else digits
    sign = "" if low is not None and low >= 0 else "-?"
    return rf"^{sign}(?:{number})$"


class FormFieldFilterExtension(DjangoFilterExtension):
    """django-filter parameters documented from their form fields (see the module docstring)."""

    priority = 1

    def resolve_filter_field(self, auto_schema, model, filterset_class, field_name, filter_field):
        parameters = super().resolve_filter_field(
            auto_schema, model, filterset_class, field_name, filter_field
        )
        exact = form_field_schema(
            filter_field.field, choices_read_when_asked=callable(filter_field.extra.get("choices"))
        )
        if exact is None:
            return parameters
        for parameter in parameters:
            if parameter["schema"].get("type") == "array":
                parameter["schema"]["items"] = dict(exact)
            else:
                parameter["schema"] = dict(exact)
                parameter.update(empty_is_none(parameter))
        return parameters
