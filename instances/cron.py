"""Cron expressions of pool schedules: parse (Celery's crontab parser), describe in words
(cron-descriptor), and find when they fire in an IANA time zone.

Times are matched on the zone's wall clock, walked in UTC quarter hours (every zone's offset
today is a whole number of quarter hours, so a quarter hour never straddles a change of
offset). So daylight saving behaves as the zone says: a wall time the spring change skips does
not happen that day, and a wall time the autumn change repeats fires once, the first time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from celery.schedules import ParseException, crontab_parser
from cron_descriptor import (
    ExpressionDescriptor,
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
)
from django.core.exceptions import ValidationError

QUARTER = timedelta(minutes=15)
FIELDS = ("minute", "hour", "day of month", "month", "day of week")


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday, as cron counts
    any_day: bool
    any_weekday: bool

    def day_matches(self, moment: datetime) -> bool:
        """Cron's rule: when both day fields are restricted, either one matching is enough."""
        day = moment.day in self.days
        weekday = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday


@lru_cache(maxsize=4096)
def parse(expression: str) -> Cron:
    """Parse a cron expression or raise ValidationError (code ``invalid_cron``) naming the
    field that is wrong. Cached: a pass over a thousand pools parses a few distinct ones."""
    text = " ".join((expression or "").split())
    parts = text.split(" ")
    if len(parts) != 5:
        raise ValidationError(
            f"A cron expression has five fields (minute hour day-of-month month day-of-week), "
            f"e.g. '0 9 * * 1-5'; '{text[:100]}' has {len(parts) if text else 0}.",
            code="invalid_cron",
        )
    parsers = (
        crontab_parser(60),
        crontab_parser(24),
        crontab_parser(31, 1),
        crontab_parser(12, 1),
        crontab_parser(8),  # 0-7: cron lets Sunday be 7 as well as 0
    )
    values = []
    for name, part, parser in zip(FIELDS, parts, parsers, strict=True):
        try:
            values.append(frozenset(parser.parse(part)))
        except (ValueError, ParseException, IndexError, KeyError) as error:
            raise ValidationError(
                f"The {name} field '{part[:40]}' of the cron expression is not valid: {error}",
                code="invalid_cron",
            ) from None
    weekdays = frozenset(d % 7 for d in values[4])
    return Cron(
        expression=text,
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=weekdays,
        any_day=parts[2] in ("*", "?"),
        any_weekday=parts[4] in ("*", "?"),
    )


def zone(name: str) -> ZoneInfo:
    """An IANA time zone by name, or ValidationError (code ``unknown_timezone``)."""
    if not name or name not in _zone_names():
        raise ValidationError(
            f"'{(name or '')[:64]}' is not an IANA time zone; use a name such as "
            "'Europe/Berlin', 'Asia/Shanghai' or 'UTC'.",
            code="unknown_timezone",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"'{name}' is not an IANA time zone.", code="unknown_timezone"
        ) from None


_ZONES: frozenset[str] | None = None


def _zone_names() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones() | {"UTC"})
    return _ZONES


def describe(expression: str, timezone_name: str) -> str:
    """'At 09:00, Monday through Friday (Asia/Shanghai)'."""
    options = Options()
    options.use_24hour_time_format = True
    options.day_of_week_start_index_zero = True
    try:
        words = ExpressionDescriptor(expression, options).get_description()
    except (FormatException, MissingFieldException, WrongArgumentException, ValueError):
        # Its own errors on what parse() accepted: fall back to the text.
        words = f"cron '{expression}'"
    return f"{words} ({timezone_name})"


def _quarters(start: datetime, end: datetime):
    """UTC quarter hours from the one holding ``start`` up to ``end``."""
    at = start.astimezone(UTC).replace(second=0, microsecond=0)
    at -= timedelta(minutes=at.minute % 15)
    while at <= end:
        yield at
        at += QUARTER


def _fires_in(cron: Cron, tz: ZoneInfo, quarter: datetime):
    """The UTC instants in one UTC quarter hour at which ``cron`` fires on ``tz``'s clock."""
    local = quarter.astimezone(tz)
    if local.fold:
        return  # the repeated hour of an autumn change: fired the first time round
    if local.month not in cron.months or local.hour not in cron.hours:
        return
    if not cron.day_matches(local):
        return
    for minute in range(local.minute, local.minute + 15):
        if minute in cron.minutes:
            yield quarter + timedelta(minutes=minute - local.minute)


def last_fire(cron: Cron, tz: ZoneInfo, *, after: datetime, until: datetime) -> datetime | None:
    """The latest instant in (after, until] at which ``cron`` fires, or None."""
    found = None
    for quarter in _quarters(after, until):
        for moment in _fires_in(cron, tz, quarter):
            if after < moment <= until:
                found = moment
    return found


def next_runs(cron: Cron, tz: ZoneInfo, *, after: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` instants after ``after`` (looking at most five years ahead, which
    covers a 29 February)."""
    runs: list[datetime] = []
    for quarter in _quarters(after, after + timedelta(days=5 * 366)):
        for moment in _fires_in(cron, tz, quarter):
            if moment > after:
                runs.append(moment)
                if len(runs) == count:
                    return runs
    return runs
