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
