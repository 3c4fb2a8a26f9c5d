"""Beat is alive while every periodic task was sent within two of its periods."""

from __future__ import annotations

import pytest

from portal.celery_ops import beat_clear, beat_record, beat_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def schedule(settings):
    settings.CELERY_BEAT_SCHEDULE = {
        "reconcile-instances": {"task": "instances.tasks.reconcile", "schedule": 30},
        "meter-usage": {"task": "billing.tasks.meter_usage", "schedule": 60},
    }
    beat_clear()
    yield
    beat_clear()


NOW = 1_800_000_000.0


def test_beat_is_ok_when_every_task_ran_within_two_periods(schedule):
    beat_record("reconcile-instances", at=NOW - 59)
    beat_record("meter-usage", at=NOW - 100)
    assert beat_state(now=NOW).ok


def test_beat_is_stale_when_a_task_missed_two_periods_and_says_which(schedule):
    beat_record("reconcile-instances", at=NOW - 61)
    beat_record("meter-usage", at=NOW - 10)
    state = beat_state(now=NOW)
    assert not state.ok
    assert state.stale == ["reconcile-instances"]
    assert "reconcile-instances" in state.reason
    assert "10 s ago" in state.reason


def test_health_reports_a_live_beat(client, schedule, clock):
    now = clock.now.timestamp()
    beat_record("reconcile-instances", at=now - 5)
    beat_record("meter-usage", at=now - 5)
    body = client.get("/health/").json()
    assert (body["beat"], body["beat_reason"]) == ("ok", "ok")


def test_health_reports_a_stale_beat_with_the_reason(client, schedule, clock):
    now = clock.now.timestamp()
    beat_record("reconcile-instances", at=now - 600)
    beat_record("meter-usage", at=now - 600)
    body = client.get("/health/").json()
    assert body["status"] == "degraded"
    assert body["beat"] == "stale"
    assert "meter-usage, reconcile-instances" in body["beat_reason"]
