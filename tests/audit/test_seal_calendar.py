"""Sealing the audit chain across midnight and a month's end, at each of tests/clock.py's
boundary instants: a day is verified by the periods that overlap it, and a sealer that stops is
noticed whatever the date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from audit.models import AuditCheckpoint, AuditEvent
from audit.services import audit_chain_seal
from audit.services.verify import audit_chain_verify
from tests.audit.conftest import make_events, tampering

pytestmark = pytest.mark.django_db
PERIOD = timedelta(minutes=5)


@pytest.fixture
def sealed_hour(boundary_clock, settings) -> list[AuditCheckpoint]:
    """Seals every five minutes from 40 minutes before the instant to 40 minutes after (so
    across midnight at 23:30 on a month's last day and at 00:05 on the first), with two rows a
    minute into each period."""
    settings.PORTAL_AUDIT_SEAL_SECONDS = int(PERIOD.total_seconds())
    boundary_clock.shift(-timedelta(minutes=40))
    audit_chain_seal()
    for _ in range(16):
        boundary_clock.shift(timedelta(minutes=1))
        make_events(2)
        boundary_clock.shift(PERIOD - timedelta(minutes=1))
        audit_chain_seal()
    return list(AuditCheckpoint.objects.order_by("number"))


def day_window(day) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def test_a_day_is_verified_by_the_periods_that_overlap_it(sealed_hour):
    first, last = sealed_hour[0], sealed_hour[-1]
    days = sorted({first.period_start.date(), last.period_end.date()})
    victim = AuditEvent.objects.order_by("seq").first()  # sealed in the hour's first period
    with tampering():
        AuditEvent.objects.filter(seq=victim.seq).update(status=204)
    for day in days:
        start, end = day_window(day)
        report = audit_chain_verify(start=start, end=end)
        assert report.checkpoints > 0, day
        found = [(problem.kind, problem.seq) for problem in report.problems]
        if day == victim.time.date():
            assert found == [("edited", victim.seq)], day
        else:  # the next day's periods sealed nothing of the day before
            assert found == [], day


def test_the_whole_chain_verifies_across_the_boundary(sealed_hour):
    report = audit_chain_verify()
    assert report.ok, report.problems
    assert (report.rows, report.checkpoints) == (32, 17)


def test_a_sealer_that_stops_is_reported_whatever_the_date(boundary_clock, sealed_hour):
    boundary_clock.shift(PERIOD)
    assert audit_chain_verify().ok  # the next seal is merely due
    boundary_clock.shift(timedelta(hours=1))
    assert [problem.kind for problem in audit_chain_verify().problems] == ["stale"]
