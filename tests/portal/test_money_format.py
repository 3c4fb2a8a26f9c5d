"""The portal's one money format: two decimals for amounts, and for hourly rates from $1 up;
four for hourly rates under $1 (issue 13's catalog mixed $0.8048, $1.006, $26.40, $31.229)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from django.template import Context, Template, TemplateSyntaxError

from portal.templatetags.portal_tags import usd

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("0.8048", "$0.8048"),
        ("1.006", "$1.01"),
        ("26.4", "$26.40"),
        ("31.229", "$31.23"),
        ("98.32", "$98.32"),
        ("0.351500", "$0.3515"),
        ("0.30", "$0.3000"),
        ("0.99996", "$1.00"),
        ("0", "$0.0000"),
        ("1234.5", "$1,234.50"),
    ],
)
def test_an_hourly_rate_keeps_four_decimals_only_under_a_dollar(value, shown):
    assert usd(Decimal(value), "rate") == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("0.016767", "$0.02"),
        ("0.004", "$0.00"),
        ("0.005", "$0.01"),
        ("12.07", "$12.07"),
        ("97.1", "$97.10"),
        ("-3.456", "-$3.46"),
        ("1234567.891", "$1,234,567.89"),
        (3, "$3.00"),
    ],
)
def test_an_amount_has_two_decimals_whatever_its_size(value, shown):
    assert usd(Decimal(value)) == shown
    assert usd(Decimal(value), 2) == shown  # the older spelling usd:2 means the same


def test_nothing_is_a_dash_and_an_unknown_kind_is_refused():
    assert usd(None) == "—"
    assert usd("") == "—"
    with pytest.raises(TemplateSyntaxError):
        usd(Decimal("1"), 4)


def test_templates_use_the_one_filter():
    rendered = Template('{% load portal_tags %}{{ a|usd }} {{ r|usd:"rate" }}/h').render(
        Context({"a": Decimal("0.5"), "r": Decimal("0.8048")})
    )
    assert rendered == "$0.50 $0.8048/h"
    # No template formats money another way (the old rate filter, fixed places, floatformat).
    offenders = [
        str(path.relative_to(TEMPLATES))
        for path in TEMPLATES.rglob("*.html")
        if any(old in path.read_text() for old in ("|rate", "|usd:4", "|usd:6"))
    ]
    assert not offenders
