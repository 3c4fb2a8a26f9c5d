"""API plumbing shared by every app: paging and the error shape.

Every error a caller can cause answers ``{"code": ..., "detail": ..., "fields": {...}}``:
a machine-readable code, one sentence saying what to change, and per-field messages when the
input had fields.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import PortalError


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500


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
        body = {"code": exc.code, "detail": exc.message}
        if exc.field:
            body["fields"] = {exc.field: [exc.message]}
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
        fields = _flatten(exc.detail)
        sentences = [
            " ".join(messages) if name == "non_field_errors" else f"{name}: {' '.join(messages)}"
            for name, messages in fields.items()
        ]
        response.data = {
            "code": _first_code(exc.get_codes()),
            "detail": " ".join(sentences),
            "fields": fields,
        }
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = _first_code(exc.get_codes()) if isinstance(exc, exceptions.APIException) else ""
        response.data = {"code": code or "error", "detail": str(detail)}
    return response
