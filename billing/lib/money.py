"""Exact money for metering, and the one rounding that happens when a figure is shown.

A rate is a whole number of micro-dollars per hour (prices carry six decimal places), and a
charge is that rate times whole seconds: an integer in *rate-seconds* (µ$/h x s). Dividing by
3,600,000,000 gives dollars; no charge is ever divided before it is shown, so any sum of charges
(a day, a month, a project) is exact, and splitting an interval anywhere never loses a fraction
of a cent.

Rounding happens once, at display, and shown lines always add up to the shown total: a column is
rounded as a whole and its lines get the rounded units by largest remainder (the Hamilton
method), so a report never says "lines $10.01, total $10.00".
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

MICROS_PER_DOLLAR = 1_000_000
SECONDS_PER_HOUR = 3600
# Rate-seconds in one dollar: micro-dollars per hour x seconds.
RS_PER_DOLLAR = MICROS_PER_DOLLAR * SECONDS_PER_HOUR
RS_PER_CENT = RS_PER_DOLLAR // 100
# GPU-hours are shown to a tenth: 360 GPU-seconds.
GPU_SECONDS_PER_TENTH_HOUR = SECONDS_PER_HOUR // 10


def micros(price: Decimal | int | str) -> int:
    """A price per hour in dollars as whole micro-dollars; refuses a price finer than that."""
    value = Decimal(price) * MICROS_PER_DOLLAR
    if value != value.to_integral_value():
        raise ValueError(f"{price} has more than six decimal places")
    return int(value)


def round_half_up(value: int, unit: int) -> int:
    """value / unit rounded to a whole number, halves away from zero (as the usd filter does)."""
    quotient, remainder = divmod(abs(value), unit)
    if 2 * remainder >= unit:
        quotient += 1
    return quotient if value >= 0 else -quotient


def allocate(values: Sequence[int], unit: int, *, total_units: int | None = None) -> list[int]:
    """Round each value to whole units so that they add up to the rounded total.

    ``total_units`` is the rounded total a parent line was given (hierarchical reports: groups
    first, then each group's periods); by default the exact total rounded half up. Lines get
    their floor, and the units still missing go to the largest remainders (ties: first line).
    """
    exact_total = sum(values)
    target = round_half_up(exact_total, unit) if total_units is None else total_units
    floors = [value // unit for value in values]
    remainders = [value - floor * unit for value, floor in zip(values, floors, strict=True)]
    missing = target - sum(floors)
    if not 0 <= missing <= len(values):
        raise ValueError(f"cannot allocate {target} units over {values} (unit {unit})")
    order = sorted(range(len(values)), key=lambda i: (-remainders[i], i))
    for index in order[:missing]:
        floors[index] += 1
    return floors


def cents_to_decimal(cents: int) -> Decimal:
    return Decimal(cents).scaleb(-2)


def dollars(rate_seconds: int, places: int = 2) -> Decimal:
    """One figure rounded once (half up) to ``places`` decimals of a dollar."""
    unit = RS_PER_DOLLAR // 10**places
    return Decimal(round_half_up(rate_seconds, unit)).scaleb(-places)


def gpu_hours_to_decimal(tenths: int) -> Decimal:
    return Decimal(tenths).scaleb(-1)


def allocate_split(
    pairs: Sequence[tuple[int, int]], unit: int, *, totals: tuple[int, int]
) -> list[tuple[int, int]]:
    """Round (on-demand, spot) pairs to whole units, the rows in a stable order (it breaks ties).

    ``totals`` are the shown column totals (each the floor or ceiling of its column's exact
    sum, their sum the floor or ceiling of the whole). Every shown figure, each half of a pair
    and each pair's sum alike, is the floor or ceiling of its exact value, the columns add up to
    ``totals``, and rows with the same exact sum get the same shown sum unless the totals leave
    fewer units than such rows (then they differ by one unit, the earlier rows getting it).

    How: a row's floor parts are its start; the units left over go, a row's sum first, to the
    largest remainders of the sums (as ``allocate`` does, ties to the earlier row), skipping only
    a row whose extra unit no column total has room for; then the rows whose one extra unit may
    fall in either column give it to the column where its remainder is larger, as far as each
    column's total allows. Such a choice always exists (the rounded table is an integer point
    of a polytope that the exact table lies in), and the skipping is decided by counting.
    """
    rows = []
    for first, second in pairs:
        f1, r1 = divmod(first, unit)
        f2, r2 = divmod(second, unit)
        rows.append((f1, r1, f2, r2))
    left_first = totals[0] - sum(row[0] for row in rows)
    left_second = totals[1] - sum(row[2] for row in rows)
    # Kinds of row by the units their sum may get beyond the floors: a FIRST or SECOND row one
    # unit in that column or none; a FREE row none or one in either column; an EVEN row (the
    # remainders make exactly a unit) one in either; a FULL row one in either, or one in each.
    kinds, fractions = [], []
    for _, r1, _, r2 in rows:
        if r1 and r2:
            kind = "free" if r1 + r2 < unit else "even" if r1 + r2 == unit else "full"
        else:
            kind = "first" if r1 else "second" if r2 else "none"
        kinds.append(kind)
        fractions.append((r1 + r2) % unit)
    given = [[0, 0] for _ in rows]
    base = sum(kind in ("even", "full") for kind in kinds)
    wanted = left_first + left_second - base
    order = sorted(
        (i for i, kind in enumerate(kinds) if kind in ("first", "second", "free", "full")),
        key=lambda i: (-fractions[i], i),
    )
    remaining = {kind: 0 for kind in ("first", "second", "free", "full")}
    for i in order:
        remaining[kinds[i]] += 1
    room = [left_first, left_second]

    def reachable() -> int:
        """The most rows still to come that can take their extra unit within the room left."""
        most, top = 0, min(remaining["full"], *room)
        for full in {0, top, room[0] - remaining["first"], room[1] - remaining["second"]}:
            full = min(max(full, 0), top)
            taken = (
                full
                + min(remaining["first"], room[0] - full)
                + min(remaining["second"], room[1] - full)
            )
            most = max(most, taken)
        return most + remaining["free"]

    if min(room) < 0 or not 0 <= wanted <= reachable():
        raise ValueError(f"cannot allocate {totals} units over {list(pairs)} (unit {unit})")
    flexible = [i for i, kind in enumerate(kinds) if kind == "even"]
    for i in order:
        kind = kinds[i]
        remaining[kind] -= 1
        if not wanted:
            if kind == "full":
                flexible.append(i)
            continue
        uses = {"first": (1, 0), "second": (0, 1), "free": (0, 0), "full": (1, 1)}[kind]
        room[0] -= uses[0]
        room[1] -= uses[1]
        if min(room) >= 0 and reachable() >= wanted - 1:
            wanted -= 1
            given[i] = list(uses)
            if kind == "free":
                flexible.append(i)
        else:
            room[0] += uses[0]
            room[1] += uses[1]
            if kind == "full":
                flexible.append(i)
    # The rows with one unit for either column: to the column of the larger remainder first.
    flexible.sort(key=lambda i: (rows[i][3] - rows[i][1], i))
    to_first = room[0]
    if wanted or not 0 <= to_first <= len(flexible) or sum(room) != len(flexible):
        raise ValueError(f"cannot allocate {totals} units over {list(pairs)} (unit {unit})")
    for n, i in enumerate(flexible):
        given[i][0 if n < to_first else 1] += 1
    return [(f1 + up[0], f2 + up[1]) for (f1, _, f2, _), up in zip(rows, given, strict=True)]
