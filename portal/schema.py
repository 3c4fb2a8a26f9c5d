"""The OpenAPI schema says what the API answers, errors included.

Every operation documents the error answers any call can get (400, 401, 403, 404, 409, 429) with
the one error body (``Error``), and a request body that refuses unknown fields says so with
``additionalProperties: false``. Done here once, not per view, so a new view cannot forget.
"""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema

from portal.rest import ErrorSerializer

ERRORS = {
    "400": "The input is not valid; `fields` names what to change.",
    "401": "Not signed in: send a session cookie or `Authorization: Bearer <token>`.",
    "403": "Signed in, but not allowed to do this.",
    "404": "No such object, or not one the caller may see.",
    "409": "The state of things refuses it (quota, budget, a host's status).",
    "429": "Too many requests or failed sign-ins; `Retry-After` says when to try again.",
}


class PortalAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for status, description in ERRORS.items():
            if status not in responses:
                error = self._get_response_for_code(ErrorSerializer, status, direction=direction)
                error["description"] = description
                responses[status] = error
        return responses

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "rejects_unknown_fields", False):
            schema["additionalProperties"] = False
        return schema
