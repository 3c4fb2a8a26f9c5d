"""Every /api/ answer says the API's version in API-Version, the schema's info.version, so a
client (the gpu command) can warn that it is older than the API from any call it makes."""

from __future__ import annotations

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db


def test_every_api_answer_carries_the_schemas_version(client, alice):
    version = settings.SPECTACULAR_SETTINGS["VERSION"]
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.json()["info"]["version"] == version
    assert schema["API-Version"] == version
    # Refusals too: a client learns the version from its first call, whatever the answer.
    assert client.get("/api/v1/instances/")["API-Version"] == version  # 401
    assert client.get("/api/v1/no-such-thing/")["API-Version"] == version  # 404
    client.force_login(alice)
    assert client.get("/api/v1/projects/")["API-Version"] == version


def test_pages_do_not_carry_it(client, alice):
    client.force_login(alice)
    assert "API-Version" not in client.get("/dashboard/")
