"""GET /health/ reports the database and the broker, without a login."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError

from portal.lib.celery_ops import beat_clear


@pytest.fixture
def broken_broker(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_health_is_degraded_without_beat_and_workers_and_says_why(client, db):
    beat_clear()
    response = client.get("/health/")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert (body["database"], body["broker"]) == ("ok", "ok")
    assert body["beat"] == "stale"
    assert body["beat_reason"] == "beat has never sent a periodic task"
    assert body["workers"] == "missing"
    assert "no worker answered a ping" in body["workers_reason"]


def test_health_names_the_broker_when_it_is_down(client, db, broken_broker):
    response = client.get("/health/")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["broker"]
    assert body["database"] == "ok"


def test_health_names_the_database_when_it_is_down(client, db):
    with mock.patch("portal.views.health.connection.cursor", side_effect=OperationalError("down")):
        response = client.get("/health/")
    assert response.status_code == 503
    assert response.json()["failing"] == ["database"]


def test_health_is_not_cached(client, db):
    assert "no-cache" in client.get("/health/")["Cache-Control"]
