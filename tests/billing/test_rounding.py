"""Report rounding a finance reader can trust: equal spends show equal lines, every line lies
between the floor and ceiling of its exact value, and lines add up to the total shown."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from billing.lib.money import RS_PER_CENT, allocate, allocate_split, micros, round_half_up
from billing.selectors.reports import Exact, ReportQuery, report_round

UNIT = 100
# Values on a grid of quarter units (and a few odd ones), so that equal remainders and equal
# rows, where rounding has to break ties, come up often.
AMOUNT = st.one_of(st.integers(0, 24).map(lambda q: q * UNIT // 4), st.integers(0, 6 * UNIT))


def floor_ceil(value: int, unit: int) -> tuple[int, int]:
    return value // unit, -(-value // unit)


def within(shown: int, exact: int, unit: int) -> bool:
    low, high = floor_ceil(exact, unit)
    return low <= shown <= high


@st.composite
def tables(draw):
    """Rows of (on-demand, spot) and column totals a report could show for them: each the
    floor or ceiling of its column, their sum the floor or ceiling of the whole."""
    rows = draw(st.lists(st.tuples(AMOUNT, AMOUNT), max_size=9))
    if rows and draw(st.booleans()):
        rows += [rows[0]] * draw(st.integers(1, 4))  # identical rows
    first = sum(r[0] for r in rows)
    second = sum(r[1] for r in rows)
    totals = (
        draw(st.sampled_from(floor_ceil(first, UNIT))),
        draw(st.sampled_from(floor_ceil(second, UNIT))),
    )
    assume(within(sum(totals), first + second, UNIT))
    return rows, totals


@given(tables())
@settings(max_examples=400, suppress_health_check=[HealthCheck.filter_too_much])
def test_every_shown_figure_is_a_floor_or_ceiling_and_the_columns_add_up(table):
    rows, totals = table
    shown = allocate_split(rows, UNIT, totals=totals)
    assert (sum(s[0] for s in shown), sum(s[1] for s in shown)) == totals
    for (first, second), (a, b) in zip(rows, shown, strict=True):
        assert within(a, first, UNIT)
        assert within(b, second, UNIT)
        assert within(a + b, first + second, UNIT)


@given(tables())
@settings(max_examples=300, suppress_health_check=[HealthCheck.filter_too_much])
def test_rows_with_equal_sums_show_sums_one_unit_apart_at_most(table):
    rows, totals = table
    shown = allocate_split(rows, UNIT, totals=totals)
    by_sum: dict[int, list[int]] = {}
    for (first, second), (a, b) in zip(rows, shown, strict=True):
        by_sum.setdefault(first + second, []).append(a + b)
    for sums in by_sum.values():
        assert max(sums) - min(sums) <= 1


@given(st.integers(1, 12), st.tuples(AMOUNT, AMOUNT))
def test_identical_rows_show_identical_sums_unless_the_total_does_not_divide(count, row):
    rows = [row] * count
    first, second = count * row[0], count * row[1]
    whole = round_half_up(first + second, UNIT)
    totals = allocate([first, second], UNIT, total_units=whole)
    sums = [a + b for a, b in allocate_split(rows, UNIT, totals=tuple(totals))]
    if whole % count == 0:
        assert len(set(sums)) == 1
    else:
        # The cents that do not divide among the rows go to the first ones, one each.
        assert sums == sorted(sums, reverse=True) and max(sums) - min(sums) == 1


def test_a_total_that_is_not_a_rounding_of_the_rows_is_refused():
    with pytest.raises(ValueError, match="cannot allocate"):
        allocate_split([(150, 150)], UNIT, totals=(3, 0))


# --- the report, from exact sums -----------------------------------------------------------------

START = date(2026, 11, 2)
QUERY = ReportQuery(start=START, end=START + timedelta(days=3), group_by="project")
# A quarter of a cent in rate-seconds, so that remainders tie often.
QUARTER = RS_PER_CENT // 4
CENTS = st.one_of(st.integers(0, 40).map(lambda q: q * QUARTER), st.integers(0, 10 * RS_PER_CENT))


@st.composite
def spends(draw):
    """Exact sums per project and day; some projects copy another's spend exactly."""
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    exact = {}
    for name in names:
        days = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
        exact[name] = {
            START + timedelta(days=d): Exact(
                on_demand=draw(CENTS),
                spot=draw(CENTS),
                savings=draw(CENTS),
                gpu_seconds=draw(st.integers(0, 36_000)),
            )
            for d in days
        }
    if len(names) > 1 and draw(st.booleans()):
        exact[names[-1]] = {
            day: Exact(e.on_demand, e.spot, e.savings, e.gpu_seconds)
            for day, e in exact[names[0]].items()
        }
    return exact


SHOWN = ("on_demand_cents", "spot_cents", "savings_cents", "gpu_tenths")


def cents_of(figures) -> tuple[int, ...]:
    return tuple(getattr(figures, name) for name in SHOWN)


def column_sums(many) -> tuple[int, ...]:
    many = list(many)
    return tuple(sum(getattr(figures, name) for figures in many) for name in SHOWN)


def assert_within(figures) -> None:
    exact = figures.exact
    assert within(figures.on_demand_cents, exact.on_demand, RS_PER_CENT)
    assert within(figures.spot_cents, exact.spot, RS_PER_CENT)
    assert within(figures.on_demand_cents + figures.spot_cents, exact.cost, RS_PER_CENT)
    assert within(figures.savings_cents, exact.savings, RS_PER_CENT)


@given(spends())
@settings(max_examples=250)
def test_report_lines_are_floors_or_ceilings_add_up_and_treat_equal_spend_alike(exact):
    report = report_round(QUERY, exact, {key: key for key in exact})
    total = report.total
    # The total is the exact sum rounded once, half up.
    assert total.on_demand_cents + total.spot_cents == round_half_up(
        sum(e.cost for days in exact.values() for e in days.values()), RS_PER_CENT
    )
    assert_within(total)
    # Groups add up to the total and lines to their group, in every column.
    assert column_sums(g.figures for g in report.groups) == cents_of(total)
    for group in report.groups:
        assert_within(group.figures)
        assert column_sums(line.figures for line in group.lines) == (cents_of(group.figures))
        for line in group.lines:
            assert_within(line.figures)
    # Equal exact spend: equal shown spend, or one cent apart when the total runs out.
    spend: dict[int, list[Decimal]] = {}
    for group in report.groups:
        spend.setdefault(group.figures.exact.cost, []).append(group.figures.cost)
    for shown in spend.values():
        assert max(shown) - min(shown) <= Decimal("0.01")
    # The periods add up to the total too.
    assert column_sums(f for _, f in report.periods) == cents_of(total)


def test_two_projects_with_the_same_spend_show_the_same_line():
    """The issue's example: $0.2075 each ($0.1025 on-demand, $0.1050 spot) showed as $0.22
    and $0.20 when each column was shared on its own."""
    each = Exact(on_demand=micros("0.1025") * 3600, spot=micros("0.1050") * 3600)
    exact = {
        "a-lab": {START: each},
        "b-lab": {START: Exact(on_demand=each.on_demand, spot=each.spot)},
    }
    report = report_round(QUERY, exact, {"a-lab": "a-lab", "b-lab": "b-lab"})
    assert [g.figures.cost for g in report.groups] == [Decimal("0.21"), Decimal("0.21")]
    assert report.total.cost == Decimal("0.42")
    # On-demand $0.205 and spot $0.21 in all: 21 + 21 cents, one project's on-demand cent
    # going to the other's spot, as the column totals require.
    assert (report.total.on_demand, report.total.spot) == (Decimal("0.21"), Decimal("0.21"))
    assert sorted((g.figures.on_demand, g.figures.spot) for g in report.groups) == [
        (Decimal("0.10"), Decimal("0.11")),
        (Decimal("0.11"), Decimal("0.10")),
    ]


# --- the same through the API, the page and the CSV ----------------------------------------------


@pytest.fixture
def twin_spend(projects, alice, carol, catalog, clock):
    """vision-lab and nlp-lab each spent $0.1025 on-demand and $0.1050 spot today."""
    from billing.models import DailyRollup

    today = clock.now.date()
    for project, user in ((projects["vision-lab"], alice), (projects["nlp-lab"], carol)):
        for market, amount in (("on_demand", "0.1025"), ("spot", "0.1050")):
            DailyRollup.objects.create(
                day=today,
                project=project,
                user=user,
                instance_type=catalog["g5.xlarge"],
                gpu_model="A10G",
                market=market,
                seconds=600,
                billed_seconds=600,
                gpu_seconds=600,
                cost_rs=micros(amount) * 3600,
                list_cost_rs=micros("0.1677") * 3600,
                pieces=1,
            )
    return f"start={today}&end={today}"


def test_the_api_shows_equal_spend_alike_with_the_exact_amounts_beside(api_as, fin, twin_spend):
    body = api_as(fin).get(f"/api/v1/costs/?{twin_spend}").json()
    assert {g["key"]: g["cost"] for g in body["groups"]} == {
        "nlp-lab": "0.21",
        "vision-lab": "0.21",
    }
    assert body["total"]["cost"] == "0.42"
    assert body["total"]["exact"] == {
        "cost": "0.415000",
        "on_demand": "0.205000",
        "spot": "0.210000",
        "savings": "0.255800",
        "on_demand_equivalent": "0.670800",
    }
    for group in body["groups"]:
        assert group["exact"]["cost"] == "0.207500"
        alone = api_as(fin).get(f"/api/v1/costs/?{twin_spend}&project={group['key']}").json()
        assert alone["total"]["cost"] == group["cost"] == "0.21"
    assert [line["exact"]["cost"] for line in body["lines"]] == ["0.207500", "0.207500"]
    assert body["periods"][0]["exact"]["cost"] == "0.415000"


def test_the_csv_has_the_lines_the_page_shows(client, fin, twin_spend):
    from bs4 import BeautifulSoup

    client.force_login(fin)
    soup = BeautifulSoup(client.get(f"/costs/?{twin_spend}").content, "html.parser")
    # Period, group, on-demand, spot, total, saved, GPU-hours.
    on_page = [
        [cell.text.strip() for cell in row.select("td")]
        for row in soup.select(".lines-card tbody tr")
    ]
    response = client.get(f"/costs/export.csv?{twin_spend}")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    in_csv = [[r[0], r[2], *(f"${amount}" for amount in r[3:7]), r[8]] for r in rows[1:-1]]
    assert on_page == in_csv
    assert sorted(line[4] for line in on_page) == ["$0.21", "$0.21"]


def test_the_page_prints_the_rounding_rule(client, fin, twin_spend):
    from bs4 import BeautifulSoup

    client.force_login(fin)
    soup = BeautifulSoup(client.get(f"/costs/?{twin_spend}").content, "html.parser")
    text = " ".join(soup.select_one(".rules-card").text.split())
    assert "lies between the floor and the ceiling of its exact value" in text
    assert "lines with the same exact spend show the same amount" in text
    assert "the lines add up to the total in every column" in text


@pytest.mark.parametrize("places", [1, 2, 6])
def test_the_api_prints_whole_units_as_decimal_would_without_dividing(places):
    from random import Random

    from billing.api.reports import _fixed

    edges = [0, 1, -1, 9, -9, 10, 99, 100, -100, 10**places, 10**20 + 7, -(10**20)]
    values = edges + [Random(places).randint(-(10**12), 10**12) for _ in range(2000)]
    for units in values:
        assert _fixed(units, places) == format(Decimal(units).scaleb(-places), "f"), units
