"""Template filters for money and sizes. Rounding happens here, once, at display."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django import template

register = template.Library()


@register.filter
def usd(value, places: int | None = None) -> str:
    """$1,234.56; prices under a dollar keep four places so $0.8048 stays exact."""
    if value is None or value == "":
        return "—"
    amount = Decimal(value)
    if places is None:
        places = 2 if abs(amount) >= 1 or amount == 0 else 4
    quantum = Decimal(1).scaleb(-int(places))
    rounded = amount.quantize(quantum, rounding=ROUND_HALF_UP)
    sign = "-" if rounded < 0 else ""
    return f"{sign}${abs(rounded):,.{int(places)}f}"


@register.filter
def rate(value) -> str:
    """A price per hour as listed: $1.006, $98.32, $32.7726 (two to four places, exact)."""
    if value is None or value == "":
        return "—"
    amount = Decimal(value).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    text = f"{abs(amount):,.4f}"
    while text.endswith("0") and len(text.split(".")[1]) > 2:
        text = text[:-1]
    return f"{'-' if amount < 0 else ''}${text}"


@register.filter
def storage_gb(value) -> str:
    """250 GB, 7.68 TB."""
    gb = int(value or 0)
    if gb == 0:
        return "EBS only"
    if gb >= 1000:
        return f"{Decimal(gb) / 1000:.2f}".rstrip("0").rstrip(".") + " TB"
    return f"{gb} GB"


@register.filter
def duration(seconds) -> str:
    """2 h 14 min, 45 s, 3 d 4 h."""
    seconds = int(seconds or 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min"


@register.filter
def multiply(value, factor):
    """Exact product for money in templates (Decimal times a whole number)."""
    return Decimal(value) * Decimal(factor)
