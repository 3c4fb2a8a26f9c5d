"""The billing rules, tested as the table they are, and the arithmetic under them.

These tests need no database: billing.lib.rules is pure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.lib.money import RS_PER_CENT, allocate, dollars, micros
from billing.lib.rules import (
    RULES,
    Ended,
    Move,
    RateSeries,
    Run,
    rule_for,
    rules_in_words,
    runs_from_moves,
    segment_run,
)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
STILL, CLOUD, STOPPED = Ended.STILL_RUNNING, Ended.CLOUD_INTERRUPTION, Ended.STOPPED

# (market, how the run ended, seconds it ran) -> (seconds billed, rule). One line per case the
# issue names, and the edges of each rule.
CASES = [
    # per-second billing with a 60-second minimum per run, both markets
    ("on_demand", STOPPED, 0, 60, "minimum_minute"),
    ("on_demand", STOPPED, 1, 60, "minimum_minute"),
    ("on_demand", STOPPED, 59, 60, "minimum_minute"),
    ("on_demand", STOPPED, 60, 60, "per_second"),
    ("on_demand", STOPPED, 61, 61, "per_second"),
    ("on_demand", STOPPED, 86_400, 86_400, "per_second"),
    ("on_demand", STILL, 30, 60, "minimum_minute"),
    ("on_demand", STILL, 7_200, 7_200, "per_second"),
    # a spot host the cloud interrupts within its first hour costs nothing
    ("spot", CLOUD, 0, 0, "spot_interrupted_first_hour"),
    ("spot", CLOUD, 30, 0, "spot_interrupted_first_hour"),
    ("spot", CLOUD, 3_599, 0, "spot_interrupted_first_hour"),
    # ... after its first hour, every second
    ("spot", CLOUD, 3_600, 3_600, "per_second"),
    ("spot", CLOUD, 5_000, 5_000, "per_second"),
    # a spot host its owner stops or terminates is billed per second (and the minimum)
    ("spot", STOPPED, 30, 60, "minimum_minute"),
    ("spot", STOPPED, 1_800, 1_800, "per_second"),
    ("spot", STOPPED, 3_599, 3_599, "per_second"),
    # a spot host still running is billed up to now (it may yet be interrupted: provisional)
    ("spot", STILL, 45, 60, "minimum_minute"),
    ("spot", STILL, 1_800, 1_800, "per_second"),
]


@pytest.mark.parametrize(("market", "ended", "seconds", "billed", "rule"), CASES)
def test_the_rules_table_bills_each_case_as_written(market, ended, seconds, billed, rule):
    found = rule_for(market, ended, seconds)
    assert (found.billed(seconds), found.key) == (billed, rule)


def test_every_rule_of_the_table_is_exercised_by_a_case():
    assert {rule.key for rule in RULES} == {case[4] for case in CASES}


def test_a_rule_either_waives_a_run_or_charges_at_least_its_seconds():
    for rule in RULES:
        for seconds in (0, 1, 59, 60, 61, 3_599, 3_600, 90_000):
            if rule.covers("spot", CLOUD, seconds) or rule.covers("on_demand", STOPPED, seconds):
                charged = rule.billed(seconds)
                assert charged == 0 or charged >= seconds


def test_the_table_reads_as_sentences_for_the_costs_page():
    words = rules_in_words()
    assert [row["key"] for row in words] == [rule.key for rule in RULES]
    assert words[0]["billed"] == "nothing"
    assert words[0]["ended"] == "interrupted by the cloud"


# --- runs from status moves ---------------------------------------------------------------------


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_stop_and_start_makes_two_runs():
    moves = [
        Move("provisioning", "running", at(0)),
        Move("running", "stopping", at(30)),
        Move("stopping", "stopped", at(40)),
        Move("stopped", "starting", at(100)),
        Move("starting", "running", at(110)),
        Move("running", "stopping", at(140)),
    ]
    runs = runs_from_moves(moves)
    assert runs == [Run(at(0), at(30), STOPPED), Run(at(110), at(140), STOPPED)]
    billed = sum(rule_for("on_demand", r.ended, r.seconds(at(999))).billed(30) for r in runs)
    assert billed == 120  # two runs of 30 s: a minimum each


def test_a_run_ends_when_the_host_leaves_running_whatever_the_next_status():
    for new, ended in (
        ("stopping", STOPPED),
        ("terminating", STOPPED),
        ("terminated", STOPPED),
        ("interrupted", CLOUD),
    ):
        runs = runs_from_moves(
            [Move("provisioning", "running", at(0)), Move("running", new, at(9))]
        )
        assert runs == [Run(at(0), at(9), ended)]


def test_a_host_still_running_has_an_open_run():
    assert runs_from_moves([Move("provisioning", "running", at(5.7))]) == [Run(at(5), None, STILL)]


def test_notes_repeats_and_order_do_not_change_the_runs():
    moves = [
        Move("provisioning", "running", at(0)),
        Move("running", "running", at(10)),  # a note
        Move("running", "stopping", at(50)),
        Move("stopping", "stopped", at(50)),
        Move("stopped", "starting", at(70)),
        Move("starting", "running", at(75)),
    ]
    expected = runs_from_moves(moves)
    assert runs_from_moves(list(reversed(moves)) * 3) == expected
    assert len(expected) == 2


def test_times_are_cut_to_whole_seconds():
    runs = runs_from_moves(
        [Move("provisioning", "running", at(0.9)), Move("running", "stopping", at(61.2))]
    )
    assert runs[0].seconds(at(999)) == 61


# --- rates and segments -------------------------------------------------------------------------

G5 = micros("1.006")


def test_a_price_change_splits_a_run_and_each_part_pays_its_own_price():
    spot = RateSeries([(at(-600), micros("0.40")), (at(1800), micros("0.50"))], before_first=1)
    listed = RateSeries([], before_first=G5)
    run = Run(at(0), at(3600), STOPPED)
    parts = segment_run(run, market="spot", now=at(9999), rates=spot, list_rates=listed)
    assert [(p.start, p.end, p.rate_micros) for p in parts] == [
        (at(0), at(1800), micros("0.40")),
        (at(1800), at(3600), micros("0.50")),
    ]
    assert sum(p.cost_rs for p in parts) == 1800 * micros("0.40") + 1800 * micros("0.50")
    assert dollars(sum(p.cost_rs for p in parts)) == dollars(450_000 * 3600)  # $0.45


def test_midnight_splits_a_run_into_days():
    listed = RateSeries([], before_first=G5)
    start = datetime(2026, 11, 2, 23, 0, tzinfo=UTC)
    run = Run(start, start + timedelta(hours=2), STOPPED)
    parts = segment_run(run, market="on_demand", now=start, rates=listed, list_rates=listed)
    assert [(p.day.isoformat(), p.seconds) for p in parts] == [
        ("2026-11-02", 3600),
        ("2026-11-03", 3600),
    ]


def test_the_minimum_top_up_is_carried_by_the_first_piece_only():
    spot = RateSeries([(at(-60), 300_000), (at(10), 600_000)], before_first=1)
    listed = RateSeries([], before_first=G5)
    parts = segment_run(
        Run(at(0), at(20), STOPPED), market="spot", now=at(99), rates=spot, list_rates=listed
    )
    assert [(p.seconds, p.billed_seconds, p.list_billed_seconds) for p in parts] == [
        (10, 50, 50),
        (10, 10, 10),
    ]


def test_savings_compare_with_the_same_run_on_demand_even_when_the_cloud_waived_it():
    spot = RateSeries([], before_first=micros("0.30"))
    listed = RateSeries([], before_first=G5)
    (part,) = segment_run(
        Run(at(0), at(1200), CLOUD), market="spot", now=at(9999), rates=spot, list_rates=listed
    )
    assert part.cost_rs == 0
    assert part.list_cost_rs == G5 * 1200


# --- properties ---------------------------------------------------------------------------------

seconds_in_two_days = st.integers(min_value=0, max_value=2 * 86_400)


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=86_400 * 3),
    length=seconds_in_two_days,
    rate=st.integers(min_value=1, max_value=200_000_000),
    cuts=st.lists(
        st.tuples(st.integers(min_value=-3_600, max_value=3 * 86_400), st.integers(1, 10**8)),
        max_size=12,
    ),
    market=st.sampled_from(["on_demand", "spot"]),
    ended=st.sampled_from([STOPPED, CLOUD, STILL]),
)
def test_cutting_a_run_anywhere_and_adding_the_parts_gives_the_whole_exactly(
    start, length, rate, cuts, market, ended
):
    """The charged rate is constant; the run is cut at every list price change (and every
    midnight). However many cuts, the parts add up to the uncut run to the rate-second."""
    begin = T0 + timedelta(seconds=start)
    end = begin + timedelta(seconds=length)
    run = Run(begin, None if ended == STILL else end, ended)
    listed = RateSeries([(T0 + timedelta(seconds=s), r) for s, r in cuts], before_first=7)
    parts = segment_run(
        run,
        market=market,
        now=end,
        rates=RateSeries([], before_first=rate),
        list_rates=listed,
    )
    whole = rule_for(market, ended, length).billed(length) * rate
    assert sum(p.cost_rs for p in parts) == whole
    assert sum(p.seconds for p in parts) == length
    assert all(
        p.start.date() == (p.end - timedelta(microseconds=1)).date() or p.seconds == 0
        for p in parts
    )


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=86_400),
    length=st.integers(min_value=0, max_value=6 * 3600),
    points=st.lists(
        st.tuples(st.integers(min_value=-7200, max_value=86_400 + 6 * 3600), st.integers(1, 10**6)),
        max_size=8,
    ),
    first=st.integers(1, 10**6),
    ended=st.sampled_from([STOPPED, CLOUD]),
)
def test_pieces_at_changing_prices_add_up_to_the_run_priced_second_by_second(
    start, length, points, first, ended
):
    begin = T0 + timedelta(seconds=start)
    run = Run(begin, begin + timedelta(seconds=length), ended)
    spot = RateSeries([(T0 + timedelta(seconds=s), r) for s, r in points], before_first=first)
    listed = RateSeries([], before_first=G5)
    parts = segment_run(run, market="spot", now=run.end, rates=spot, list_rates=listed)
    rule = rule_for("spot", ended, length)
    if rule.billed(length) == 0:
        expected = 0
    else:
        by_second = sum(spot.at(begin + timedelta(seconds=s)) for s in range(length))
        expected = by_second + (rule.billed(length) - length) * spot.at(begin)
    assert sum(p.cost_rs for p in parts) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-(10**12), max_value=10**13), min_size=1, max_size=40))
def test_rounded_lines_always_add_up_to_the_rounded_total(values):
    cents = allocate(values, RS_PER_CENT)
    assert sum(cents) == allocate([sum(values)], RS_PER_CENT)[0]
    for value, shown in zip(values, cents, strict=True):
        assert abs(value - shown * RS_PER_CENT) < RS_PER_CENT  # each line within a cent


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=10),
        min_size=1,
        max_size=8,
    )
)
def test_groups_then_periods_round_so_both_add_up(table):
    groups = allocate([sum(row) for row in table], RS_PER_CENT)
    for row, group_cents in zip(table, groups, strict=True):
        lines = allocate(row, RS_PER_CENT, total_units=group_cents)
        assert sum(lines) == group_cents
    assert sum(groups) == allocate([sum(map(sum, table))], RS_PER_CENT)[0]
