"""How the seconds of a host become money: the billing rules, as one table in one place.

Everything here is pure (no database): metering feeds it a host's status moves and the price
history, and gets back the pieces of usage to store. The tests drive the same table.

The words used:

* a **run** is one stretch in ``running``: from entering it to leaving it (or to now). Stopping
  and starting a host makes a new run.
* a run is cut into **segments** wherever the rate changes (a new list price, a new spot price)
  and at every UTC midnight, so that each segment has one rate and one day.
* times are cut to whole seconds first (the cloud bills per second), so the seconds of the
  segments of a run always add up to the seconds of the run.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

RUNNING = "running"
INTERRUPTED = "interrupted"
ON_DEMAND = "on_demand"
SPOT = "spot"


class Ended:
    """How a run ended, as far as billing cares."""

    STILL_RUNNING = "still_running"
    CLOUD_INTERRUPTION = "cloud_interruption"  # the cloud took a spot host back
    STOPPED = "stopped_or_terminated"  # by its owner, a lease, a budget, or the cloud otherwise


MINIMUM_SECONDS = 60
SPOT_GRACE_SECONDS = 3600


@dataclass(frozen=True)
class Rule:
    """One row of the billing table: which runs it covers and how many seconds they cost."""

    key: str
    market: str | None  # None: either market
    ended: frozenset[str] | None  # None: however the run ended (or it is still running)
    shorter_than: int | None  # None: any length
    billed: Callable[[int], int]  # seconds of the run -> seconds charged
    charges: str  # the same, in words
    says: str

    def covers(self, market: str, ended: str, seconds: int) -> bool:
        return (
            (self.market is None or self.market == market)
            and (self.ended is None or ended in self.ended)
            and (self.shorter_than is None or seconds < self.shorter_than)
        )


# The first row that covers a run decides what it costs (EC2 Linux billing, FACTS.md).
RULES: tuple[Rule, ...] = (
    Rule(
        key="spot_interrupted_first_hour",
        market=SPOT,
        ended=frozenset({Ended.CLOUD_INTERRUPTION}),
        shorter_than=SPOT_GRACE_SECONDS,
        billed=lambda seconds: 0,
        charges="nothing",
        says="A spot host the cloud interrupts within its first hour costs nothing.",
    ),
    Rule(
        key="minimum_minute",
        market=None,
        ended=None,
        shorter_than=MINIMUM_SECONDS,
        billed=lambda seconds: MINIMUM_SECONDS,
        charges="60 seconds",
        says="Every run is billed at least 60 seconds; stopping and starting makes a new run.",
    ),
    Rule(
        key="per_second",
        market=None,
        ended=None,
        shorter_than=None,
        billed=lambda seconds: seconds,
        charges="every second",
        says="Otherwise every second of a run is billed: on-demand, spot the owner stops or "
        "terminates, spot interrupted after its first hour, and a run still going (to now).",
    ),
)

# Which price a second is billed at, by market. A price change splits the run.
RATES: dict[str, str] = {
    ON_DEMAND: "the instance type's on-demand list price in force at that second",
    SPOT: "the spot price in force at that second in the host's zone (else its region); "
    "before the first price seen, the price quoted when the order was placed",
}


_MARKET_WORDS = {None: "either", ON_DEMAND: "on-demand", SPOT: "spot"}
_ENDED_WORDS = {
    Ended.STILL_RUNNING: "still running",
    Ended.CLOUD_INTERRUPTION: "interrupted by the cloud",
    Ended.STOPPED: "stopped or terminated",
}


def rules_in_words() -> list[dict[str, str]]:
    """The table as people read it (the Costs page and docs/finance.md show this)."""
    return [
        {
            "key": rule.key,
            "says": rule.says,
            "market": _MARKET_WORDS[rule.market],
            "ended": " or ".join(_ENDED_WORDS[e] for e in sorted(rule.ended))
            if rule.ended
            else "any way, or still running",
            "length": f"under {rule.shorter_than:,} s" if rule.shorter_than else "any",
            "billed": rule.charges,
        }
        for rule in RULES
    ]


def rates_in_words() -> list[tuple[str, str]]:
    return [(_MARKET_WORDS[market], says) for market, says in RATES.items()]


def rule_for(market: str, ended: str, seconds: int) -> Rule:
    for rule in RULES:
        if rule.covers(market, ended, seconds):
            return rule
    raise LookupError(f"no billing rule covers a {market} run of {seconds} s ({ended})")


def whole_second(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def next_midnight(moment: datetime) -> datetime:
    return datetime.combine(moment.date() + timedelta(days=1), time(0), tzinfo=UTC)


def day_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return datetime.combine(moment.date(), time(0), tzinfo=UTC)


# --- runs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One stretch in ``running``; ``end`` None while it is still running."""

    start: datetime
    end: datetime | None
    ended: str

    def seconds(self, now: datetime) -> int:
        end = self.end if self.end is not None else max(now, self.start)
        return int((end - self.start).total_seconds())


@dataclass(frozen=True)
class Move:
    """A status move as metering reads it (an InstanceEvent without its bookkeeping)."""

    old: str
    new: str
    at: datetime


def runs_from_moves(moves: Iterable[Move]) -> list[Run]:
    """The runs of a host from its status moves, in any order and with any repeats.

    Moves are taken as a set (a move recorded twice counts once) and ordered by time, with a
    move into ``running`` before a move out of it at the same second; so the result depends
    only on which moves happened and when, never on the order they were stored or replayed in.
    Notes (old == new) are not moves.
    """
    marks: set[tuple[datetime, int, str]] = set()
    for move in moves:
        if move.old == move.new:
            continue
        at = whole_second(move.at)
        if move.new == RUNNING:
            marks.add((at, 0, ""))
        elif move.old == RUNNING:
            ended = Ended.CLOUD_INTERRUPTION if move.new == INTERRUPTED else Ended.STOPPED
            marks.add((at, 1, ended))
    runs: list[Run] = []
    start: datetime | None = None
    for at, phase, ended in sorted(marks):
        if phase == 0:
            if start is None:
                start = at
        elif start is not None:
            if runs and runs[-1].end == start:
                # Left and re-entered running within one second: one run, not two.
                start = runs.pop().start
            runs.append(Run(start=start, end=at, ended=ended))
            start = None
    if start is not None:
        if runs and runs[-1].end == start:
            start = runs.pop().start
        runs.append(Run(start=start, end=None, ended=Ended.STILL_RUNNING))
    return runs


# --- rates --------------------------------------------------------------------------------------


class RateSeries:
    """A price history: ``points`` are (in force from, µ$ per hour); before the first point,
    ``before_first`` applies."""

    def __init__(self, points: Iterable[tuple[datetime, int]], *, before_first: int) -> None:
        merged: list[tuple[datetime, int]] = []
        for at, rate in sorted((whole_second(at), rate) for at, rate in points):
            if merged and merged[-1][0] == at:
                merged[-1] = (at, rate)  # two prices for one second: the higher, to be sure
            elif not merged or merged[-1][1] != rate:
                merged.append((at, rate))
        self.points = merged
        self.times = [at for at, _ in merged]
        self.before_first = before_first

    def at(self, moment: datetime) -> int:
        index = bisect.bisect_right(self.times, moment) - 1
        return self.points[index][1] if index >= 0 else self.before_first

    def changes(self, start: datetime, end: datetime) -> list[datetime]:
        """Moments strictly inside (start, end) where the rate changes."""
        low = bisect.bisect_right(self.times, start)
        high = bisect.bisect_left(self.times, end)
        found = []
        for at in self.times[low:high]:
            if self.at(at - timedelta(seconds=1)) != self.at(at):
                found.append(at)
        return found


# --- segments -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A piece of a run with one rate and one UTC day: one usage row."""

    run_start: datetime
    start: datetime
    end: datetime
    seconds: int
    billed_seconds: int
    list_billed_seconds: int
    rate_micros: int
    list_rate_micros: int
    rule: str

    @property
    def day(self) -> date:
        return self.start.date()

    @property
    def cost_rs(self) -> int:
        return self.rate_micros * self.billed_seconds

    @property
    def list_cost_rs(self) -> int:
        """What the same seconds cost on-demand at the list price (savings are measured by it)."""
        return self.list_rate_micros * self.list_billed_seconds


def segment_run(
    run: Run,
    *,
    market: str,
    now: datetime,
    rates: RateSeries,
    list_rates: RateSeries,
    since: datetime | None = None,
) -> list[Segment]:
    """The segments of one run, starting at ``since`` when given (a UTC midnight inside the run,
    or the run's start): metering recomputes only what may have changed.

    The run's rule decides the seconds charged: none at all (every segment 0), or the run's
    seconds plus a top-up to the minimum, which the run's first segment carries.
    """
    now = whole_second(now)
    end = run.end if run.end is not None else max(now, run.start)
    seconds = run.seconds(now)
    rule = rule_for(market, run.ended, seconds)
    charged = rule.billed(seconds)
    if charged and charged < seconds:
        raise ValueError(f"rule {rule.key} charges less than the run without waiving it")
    top_up = charged - seconds if charged else 0
    # Savings compare with what an on-demand host would have been billed for the same run.
    list_charged = rule_for(ON_DEMAND, run.ended, seconds).billed(seconds)
    list_top_up = list_charged - seconds

    begin = run.start if since is None or since <= run.start else since
    cuts = {begin, end}
    midnight = next_midnight(begin)
    while midnight < end:
        cuts.add(midnight)
        midnight = next_midnight(midnight)
    cuts.update(rates.changes(begin, end))
    cuts.update(list_rates.changes(begin, end))
    points = sorted(cuts)
    pieces = list(itertools.pairwise(points)) or [(begin, end)]
    segments = []
    for start, stop in pieces:
        piece = int((stop - start).total_seconds())
        first = start == run.start
        segments.append(
            Segment(
                run_start=run.start,
                start=start,
                end=stop,
                seconds=piece,
                billed_seconds=(piece + (top_up if first else 0)) if charged else 0,
                list_billed_seconds=piece + (list_top_up if first else 0),
                rate_micros=rates.at(start),
                list_rate_micros=list_rates.at(start),
                rule=rule.key,
            )
        )
    return segments


def runs_touching(runs: Sequence[Run], since: datetime, now: datetime) -> list[Run]:
    """Runs with any second at or after ``since`` (a zero-length run exactly at it included)."""
    touching = []
    for run in runs:
        end = run.end if run.end is not None else max(whole_second(now), run.start)
        if end > since or run.start >= since:
            touching.append(run)
    return touching


def recompute_from(runs: Sequence[Run], since: datetime, now: datetime) -> datetime:
    """Where metering must start again to account for a change at ``since``.

    From that UTC midnight on, except that a run crossing it that is shorter than an hour is
    recomputed whole: its rule (the minute minimum, the free interrupted spot hour) depends on
    its full length and its first segment carries the top-up. Longer runs are billed per second
    whatever comes next, so their earlier days stand.
    """
    start = day_start(since)
    for run in runs:
        end = run.end if run.end is not None else max(whole_second(now), run.start)
        if run.start < start <= end and run.seconds(now) < SPOT_GRACE_SECONDS:
            start = run.start
    return start


# --- calendar months (budgets run by UTC month) ---------------------------------------------


def month_of(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def next_month(first: date) -> date:
    return date(first.year + (first.month == 12), first.month % 12 + 1, 1)


def month_end(moment: datetime) -> datetime:
    return datetime.combine(next_month(month_of(moment)), time(0), tzinfo=UTC)
