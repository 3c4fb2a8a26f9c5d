"""The instants the tests run at, so that no test depends on the day it is run.

A suite that read the wall clock failed on the last day of a month after 14:00 UTC (a forecast
to month end had too little month left). Since then every test starts at a fixed instant, in
the middle of a month, far from any day or month boundary, and its clock ticks from there;
``--clock-at`` moves that instant to prove that a test does not care where it is. Tests that
read the calendar freeze it (``clock``), and the suites most exposed to month and day
boundaries (budgets, metering, leases, approval expiry, audit seals) also run at each boundary
below (``boundary_clock``).

time-machine patches this process only: a test beside another process that reads its own clock
(a Celery worker, a browser) runs on the real clock and is marked ``real_clock``; it must not
depend on the date.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import time_machine
from django.utils import timezone

# A Tuesday morning in the middle of a month, two weeks from either end of it.
DEFAULT = datetime(2026, 11, 17, 10, 0, tzinfo=UTC)

# The boundaries: the last half hour of a month (and of a year), the first minutes of the next,
# and a leap day (itself the last day of its month).
INSTANTS = {
    "mid-month": DEFAULT,
    "month-end-23h30": datetime(2026, 12, 31, 23, 30, tzinfo=UTC),
    "month-first-00h05": datetime(2027, 1, 1, 0, 5, tzinfo=UTC),
    "leap-day": datetime(2028, 2, 29, 12, 0, tzinfo=UTC),
}


def parse_instant(text: str) -> datetime:
    """An ISO 8601 instant with its time zone (``2026-11-30T23:30Z``): one without is refused,
    since a local reading is exactly what these tests must not depend on."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--clock-at {text}: not an ISO 8601 instant, e.g. 2026-11-30T23:30Z"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"--clock-at {text}: give the time zone, e.g. {text}Z")
    return moment.astimezone(UTC)


@dataclass
class Clock:
    """The test's clock: where it started, whether it is frozen, and how to move it."""

    name: str
    start: datetime
    frozen: bool
    _traveller: time_machine.Traveller | None = field(default=None, repr=False)

    @property
    def now(self) -> datetime:
        return timezone.now()

    def shift(self, delta: timedelta) -> datetime:
        """Move the clock on (or back) by ``delta``; returns the new now."""
        assert self._traveller is not None, "this test runs on the real clock"
        self._traveller.shift(delta)
        return timezone.now()

    def move_to(self, moment: datetime) -> datetime:
        assert self._traveller is not None, "this test runs on the real clock"
        self._traveller.move_to(moment)
        return timezone.now()
