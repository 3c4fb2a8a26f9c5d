"""Template filters for money, sizes and sentences. Rounding happens here, once, at display."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django import template

register = template.Library()


RATE = "rate"


@register.filter
def usd(value, kind: str | int = "") -> str:
    """The portal's one money format: $1,234.56, two decimals; an hourly rate (``usd:"rate"``)
    keeps four decimals under a dollar so that $0.8048 stays $0.8048, and two from $1 up.

    ``usd:2`` is the older spelling of an amount and means the same as ``usd``.
    """
    if value is None or value == "":
        return "—"
    if kind not in ("", RATE, 2, "2"):
        raise template.TemplateSyntaxError(f'usd takes no argument or "rate", not {kind!r}')
    amount = Decimal(value)
    places = 4 if kind == RATE and abs(amount) < 1 else 2
    rounded = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    if kind == RATE and places == 4 and abs(rounded) >= 1:
        # $0.99996 rounds to a dollar: shown as one, with two places.
        rounded = rounded.quantize(Decimal("0.01"))
        places = 2
    sign = "-" if rounded < 0 else ""
    return f"{sign}${abs(rounded):,.{places}f}"


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


@register.filter
def sentence(text) -> str:
    """A reason shown as a sentence of its own: a full stop added unless it ends with one (the
    services' reasons come both ways), so a page never says "budget.." before what follows."""
    text = str(text).rstrip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
