"""Beat is alive while every periodic task was sent within two of its periods."""

from __future__ import annotations

import time

import pytest
from celery.signals import beat_init

from portal.lib import celery_ops
from portal.lib.celery_ops import (
    BeatState,
    beat_clear,
    beat_record,
    beat_started_at,
    beat_started_record,
    beat_state,
)

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


@pytest.fixture
def daily_schedule(settings):
    settings.CELERY_BEAT_SCHEDULE = {
        "reconcile-instances": {"task": "instances.tasks.reconcile", "schedule": 30},
        "audit-retention": {"task": "audit.tasks.apply_audit_retention", "schedule": 86400},
    }
    beat_clear()
    yield
    beat_clear()


def test_a_freshly_started_beat_is_ok_before_its_daily_task_first_runs(daily_schedule):
    beat_started_record(at=NOW - 120)
    beat_record("reconcile-instances", at=NOW - 5)
    assert beat_state(now=NOW) == BeatState(True, "ok", [])


def test_a_beat_that_started_and_sent_nothing_for_two_days_is_stale(daily_schedule):
    beat_started_record(at=NOW - 2 * 86400 - 1)
    state = beat_state(now=NOW)
    assert state.stale == ["audit-retention", "reconcile-instances"]
    assert "beat started 172801 s ago and has sent nothing since" in state.reason


def test_a_daily_task_that_ran_before_a_restart_counts_from_the_restart(daily_schedule):
    beat_record("audit-retention", at=NOW - 3 * 86400)
    beat_started_record(at=NOW - 60)
    beat_record("reconcile-instances", at=NOW - 5)
    assert beat_state(now=NOW).ok


def test_beat_records_when_it_starts(daily_schedule, monkeypatch, clock):
    monkeypatch.setattr(celery_ops, "_in_beat", False)
    beat_init.send(sender=None)
    assert beat_started_at() == pytest.approx(time.time(), abs=5)


def test_health_is_ok_on_a_fresh_start_with_a_daily_task_not_yet_sent(
    client, daily_schedule, clock, monkeypatch
):
    monkeypatch.setattr(celery_ops, "workers_state", lambda: (True, "worker@demo answered"))
    now = clock.now.timestamp()
    beat_started_record(at=now - 90)
    beat_record("reconcile-instances", at=now - 10)
    body = client.get("/health/").json()
    assert (body["status"], body["beat"], body["beat_reason"]) == ("ok", "ok", "ok")
