"""instances/api/fields.py: the serializer fields and field shapes the instances API's topic
modules share (money, a project among the caller's, bytes sent as base64)."""

from __future__ import annotations

import base64
import binascii

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.lib.rest import LookupField
from portal.models import Project

MONEY = {"max_digits": 14, "decimal_places": 6}
READ_ONLY_MONEY = {**MONEY, "read_only": True}


class ProjectOfCaller(LookupField):
    """A project slug, looked up among the projects the caller may see."""

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            return Project.objects.none()
        return Project.objects.for_user(request.user)


BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


@extend_schema_field({"type": "string", "format": "byte", "pattern": BASE64})
class Base64Field(serializers.CharField):
    """Bytes sent as base64 (the schema says ``format: byte`` and its pattern)."""

    def to_internal_value(self, data) -> bytes:
        text = super().to_internal_value(data)
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("This is not base64.", code="invalid") from None
