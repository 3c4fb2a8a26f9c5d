"""Metering real hosts: their status moves become usage rows at the rate in force."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import Max, Sum
from django.utils import timezone

from billing.lib.money import micros
from billing.models import DailyRollup, ListPrice, MeterMark, MeterState, RollupDelta, Usage
from billing.services.metering import instance_meter, usage_meter
from billing.services.rollups import rollups_rebuild, rollups_refresh
from instances.models import InstanceEvent, InstanceType
from instances.services import instance_type_save

G5 = micros("1.006")  # g5.xlarge list price in prices.json


def billed(instance) -> tuple[int, int]:
    rows = Usage.objects.filter(instance=instance).aggregate(
        seconds=Sum("billed_seconds"), cost=Sum("cost_rs")
    )
    return rows["seconds"] or 0, rows["cost"] or 0


# (what happens, market, runs as (start s, end s or None, how it ended), now s, billed seconds)
SCRIPTS = [
    (
        "an on-demand host stopped after 30 s pays a minute",
        "on_demand",
        [(0, 30, "stopped")],
        600,
        60,
    ),
    ("an on-demand host stopped after 90 s pays 90 s", "on_demand", [(0, 90, "stopped")], 600, 90),
    (
        "stop and start makes two runs, a minimum each",
        "on_demand",
        [(0, 30, "stopped"), (100, 130, "stopped")],
        600,
        120,
    ),
    ("a running host is billed up to now", "on_demand", [(0, None, "")], 7_200, 7_200),
    (
        "a host that just started pays its first minute at once",
        "on_demand",
        [(0, None, "")],
        20,
        60,
    ),
    (
        "spot interrupted by the cloud after 59 min costs nothing",
        "spot",
        [(0, 3_540, "interrupted")],
        7_200,
        0,
    ),
    (
        "spot interrupted by the cloud after 61 min pays every second",
        "spot",
        [(0, 3_660, "interrupted")],
        7_200,
        3_660,
    ),
    (
        "spot terminated by its owner after 10 min pays per second",
        "spot",
        [(0, 600, "terminated")],
        7_200,
        600,
    ),
    (
        "spot terminated by its owner after 20 s pays a minute",
        "spot",
        [(0, 20, "terminated")],
        7_200,
        60,
    ),
    (
        "a host running across midnight is billed on both days",
        "on_demand",
        [(-3_600, 3_600, "terminated")],
        7_200,
        7_200,
    ),
]


@pytest.mark.parametrize(
    ("story", "market", "runs", "now", "seconds"), SCRIPTS, ids=[s[0] for s in SCRIPTS]
)
def test_hosts_are_billed_as_the_rules_table_says(
    story, market, runs, now, seconds, play, at, meter
):
    instance = play(market, runs)
    meter(now=at(seconds=now))
    # No spot price was ever seen: spot is billed at the price quoted at order time (the list).
    assert billed(instance) == (seconds, seconds * G5)


@pytest.mark.parametrize("boundary_clock", ["month-end-23h30"], indirect=True)
def test_a_host_running_into_a_new_month_and_year_is_billed_to_each(
    boundary_clock, running_host, projects, fin, api_as
):
    """Started at 23:30 on 31 December and metered at 00:30: half an hour on each side, on
    each day's row, in each month's budget spend and in each month of the cost report."""
    from billing.services.budgets import budget_status

    running_host()
    boundary_clock.shift(timedelta(hours=1))
    usage_meter()
    rollups_refresh()
    december, january = boundary_clock.start.date(), boundary_clock.now.date()
    assert (december.isoformat(), january.isoformat()) == ("2026-12-31", "2027-01-01")
    rows = Usage.objects.order_by("start").values_list("day", "seconds")
    assert list(rows) == [(december, 1800), (january, 1800)]
    vision = projects["vision-lab"]
    assert budget_status(vision).spent_rs == 1800 * G5  # January's half hour only
    assert budget_status(vision, now=boundary_clock.start).spent_rs == 1800 * G5
    body = (
        api_as(fin)
        .get("/api/v1/costs/?start=2026-12-01&end=2027-01-31&granularity=month&group_by=project")
        .json()
    )
    # $0.503 in each month; shown to the cent, the months add up to the $1.01 total.
    periods = {p["period"]: p["cost"] for p in body["periods"]}
    assert sorted(periods) == ["2026-12-01", "2027-01-01"]
    assert sorted(periods.values()) == ["0.50", "0.51"] and body["total"]["cost"] == "1.01"


def test_a_host_running_across_midnight_has_one_row_per_day(host, run, at, meter):
    instance = run(host(), at(hours=-1), at(hours=1))
    meter(now=at(hours=2))
    rows = Usage.objects.filter(instance=instance).order_by("start")
    assert [(r.day, r.seconds) for r in rows] == [
        ((at() - timedelta(days=1)).date(), 3600),
        (at().date(), 3600),
    ]


def test_on_demand_seconds_are_billed_at_the_list_price_in_force(host, run, at, meter, list_price):
    list_price("g5.xlarge", "1.006", at(hours=-48))
    list_price("g5.xlarge", "1.200", at(hours=1))
    instance = run(host(), at(), at(hours=2))
    meter(now=at(hours=3))
    rows = list(Usage.objects.filter(instance=instance).order_by("start"))
    assert [(r.seconds, r.rate_micros) for r in rows] == [(3600, G5), (3600, micros("1.2"))]
    assert billed(instance)[1] == 3600 * G5 + 3600 * micros("1.2")


def test_a_price_changed_after_a_host_ended_does_not_change_its_cost(
    host, run, at, meter, list_price
):
    instance = run(host(), at(), at(hours=1))
    meter(now=at(hours=2))
    before = billed(instance)
    list_price("g5.xlarge", "9.999", at(hours=3))
    meter(now=at(hours=4))
    assert billed(instance) == before


def test_spot_seconds_are_billed_at_the_spot_price_in_force_and_a_change_splits(
    host, run, at, meter, spot_price
):
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    spot_price("g5.xlarge", "0.4200", at(minutes=30))
    instance = run(host(market="spot"), at(), at(hours=1), ended="terminated")
    meter(now=at(hours=2))
    rows = list(Usage.objects.filter(instance=instance).order_by("start"))
    assert [(r.seconds, r.rate_micros, r.list_rate_micros) for r in rows] == [
        (1800, micros("0.35"), G5),
        (1800, micros("0.42"), G5),
    ]
    saved = sum(r.list_cost_rs - r.cost_rs for r in rows)
    assert saved == 3600 * G5 - 1800 * (micros("0.35") + micros("0.42"))


def test_a_late_spot_price_is_applied_to_a_host_already_metered(host, run, at, meter, spot_price):
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    instance = run(host(market="spot"), at(), at(hours=2), ended="terminated")
    meter(now=at(hours=3))
    assert billed(instance)[1] == 7200 * micros("0.35")
    # The refresh brings a price for the second hour only now.
    spot_price("g5.xlarge", "0.4000", at(hours=1))
    meter(now=at(hours=3, minutes=5))
    assert billed(instance)[1] == 3600 * micros("0.35") + 3600 * micros("0.40")


def test_a_list_price_change_in_the_catalog_enters_the_history(clock, catalog):
    kind = catalog["g5.xlarge"]
    assert ListPrice.objects.filter(instance_type=kind).count() == 1
    # The catalog was synced an hour ago.
    first = ListPrice.objects.get(instance_type=kind)
    ListPrice.objects.filter(pk=first.pk).update(at=first.at - timedelta(hours=1))
    kind.on_demand_price_per_hour = Decimal("1.100000")
    instance_type_save(instance_type=kind)
    prices = list(ListPrice.objects.filter(instance_type=kind).order_by("at"))
    assert [p.price_per_hour for p in prices] == [Decimal("1.006"), Decimal("1.1")]
    instance_type_save(instance_type=kind)  # saved unchanged: nothing new
    assert ListPrice.objects.filter(instance_type=kind).count() == 2


def test_a_price_changed_behind_the_hooks_is_caught_by_the_next_pass(catalog, at):
    InstanceType.objects.filter(name="g5.xlarge").update(on_demand_price_per_hour="1.25")
    usage_meter(now=at())
    newest = ListPrice.objects.filter(instance_type__name="g5.xlarge").latest("at")
    assert newest.price_per_hour == Decimal("1.25")


def test_an_open_run_grows_each_pass_and_ends_where_the_cloud_said(host, run, at, meter):
    instance = run(host(), at())
    meter(now=at(hours=1))
    assert billed(instance)[0] == 3600
    meter(now=at(hours=2))
    assert billed(instance)[0] == 7200
    # The stop is recorded late, at the cloud's time (90 min), after a pass billed to 2 h.
    run_end = at(minutes=90)
    from tests.billing.timeline import _move

    instance = _move(instance, "stopping", run_end)
    meter(now=at(hours=3))
    assert billed(instance)[0] == 5400


def test_an_open_run_past_midnight_shrinks_back_when_the_end_arrives_late(host, run, at, meter):
    instance = run(host(), at(hours=-1))
    meter(now=at(hours=2))  # billed into the new day
    assert Usage.objects.filter(instance=instance).count() == 2
    from tests.billing.timeline import _move

    _move(instance, "stopping", at(minutes=-30))
    meter(now=at(hours=3))
    assert list(Usage.objects.filter(instance=instance).values_list("seconds", flat=True)) == [1800]


def test_a_pass_with_nothing_new_writes_nothing(host, run, at, meter):
    run(host(), at(), at(hours=1))
    first = meter(now=at(hours=2))
    assert first.written == 1
    again = meter(now=at(hours=3))
    assert (again.written, again.deleted) == (0, 0)


def test_ended_hosts_are_not_looked_at_again(host, run, at, meter):
    instance = run(host(), at(), at(hours=1), ended="terminated")
    meter(now=at(hours=2))
    assert MeterMark.objects.get(instance=instance).final
    # Minutes later, with no event or price since: nothing to look at.
    later = timezone.now() + timedelta(minutes=10)
    newest = InstanceEvent.objects.aggregate(newest=Max("id"))["newest"]
    MeterState.objects.update(prices_seen_at=later, events_from=newest)
    assert usage_meter(now=at(hours=3)).instances == 0


def test_a_late_event_of_an_ended_host_is_still_metered(host, run, at, meter):
    instance = run(host(), at(), at(hours=1), ended="terminated")
    meter(now=at(hours=2))
    # A replay of its first run's end, as if the cloud's report had been lost and resent.
    InstanceEvent.objects.create(
        instance=instance,
        old_status="running",
        new_status="stopping",
        at=at(minutes=30),
        actor="system:test",
    )
    meter(now=at(hours=3))
    assert billed(instance)[0] == 1800


# --- idempotency --------------------------------------------------------------------------------


def _snapshot():
    return sorted(
        Usage.objects.values_list(
            "instance_id",
            "start",
            "end",
            "run_start",
            "day",
            "seconds",
            "billed_seconds",
            "list_billed_seconds",
            "rate_micros",
            "list_rate_micros",
            "cost_rs",
            "list_cost_rs",
            "rule",
            "market",
            "gpu_seconds",
        )
    )


def test_replaying_events_three_times_in_any_order_yields_identical_usage_rows(
    host, run, at, meter, spot_price
):
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    spot_price("g5.xlarge", "0.4100", at(hours=2))
    a = run(host(), at(hours=-3), at(hours=-2, minutes=59, seconds=30))  # 30 s: a minimum
    a = run(a, at(hours=1), at(hours=26))  # across midnight, stopped
    b = run(host(market="spot"), at(minutes=10), at(minutes=50), ended="interrupted")  # free
    c = run(host(market="spot"), at(hours=1), at(hours=5), ended="terminated")  # spans 2 prices
    d = run(host(), at(hours=20))  # still running
    now = at(hours=30)
    meter(now=now)
    expected = _snapshot()
    assert len(expected) >= 6
    rollups = sorted(DailyRollup.objects.values_list("day", "market", "cost_rs", "pieces"))

    events = list(
        InstanceEvent.objects.filter(instance__in=[a, b, c, d]).values(
            "instance_id", "old_status", "new_status", "reason", "at", "actor"
        )
    )
    for rng_seed in (1, 2, 3):
        InstanceEvent.objects.all().delete()
        Usage.objects.all().delete()
        MeterMark.objects.all().delete()
        DailyRollup.objects.all().delete()
        RollupDelta.objects.all().delete()
        shuffled = events * 3
        random.Random(rng_seed).shuffle(shuffled)
        for index, event in enumerate(shuffled):
            InstanceEvent.objects.create(**event)
            if index % 5 == 0:  # passes while the events trickle in, out of order
                meter(now=now)
        meter(now=now)
        meter(now=now)
        got = _snapshot()
        missing = [r for r in expected if r not in got]
        extra = [r for r in got if r not in expected]
        assert (missing, extra) == ([], [])
        assert sorted(DailyRollup.objects.values_list("day", "market", "cost_rs", "pieces")) == (
            rollups
        )


def test_metering_one_host_twice_at_once_lands_on_the_same_rows(host, run, at):
    instance = run(host(), at(), at(hours=3))
    instance_meter(instance_id=instance.pk, now=at(hours=4))
    first = _snapshot()
    instance_meter(instance_id=instance.pk, now=at(hours=4), full=True)
    assert _snapshot() == first


# --- rollups ------------------------------------------------------------------------------------


def _rollup_rows() -> list[tuple]:
    columns = [f.attname for f in DailyRollup._meta.concrete_fields if f.attname != "id"]
    return sorted(DailyRollup.objects.values_list(*columns))


def _raw_and_rolled(**filters):
    fields = ["seconds", "billed_seconds", "gpu_seconds", "cost_rs", "list_cost_rs"]
    raw = Usage.objects.filter(**filters).aggregate(**{f: Sum(f) for f in fields})
    rolled = DailyRollup.objects.filter(**filters).aggregate(**{f: Sum(f) for f in fields})
    return raw, rolled


def test_rollup_totals_equal_raw_totals_exactly(
    host, run, at, meter, spot_price, bob, carol, projects
):
    spot_price("p5.48xlarge", "31.4159", at(hours=-5))
    spot_price("p5.48xlarge", "29.2718", at(hours=7, minutes=13, seconds=7))
    run(host(), at(minutes=-30), at(hours=30, seconds=7))
    run(
        host(user=bob, market="spot", instance_type="p5.48xlarge"),
        at(hours=1, seconds=3),
        at(hours=40, minutes=1),
        ended="terminated",
    )
    run(
        host(user=carol, project=projects["nlp-lab"], instance_type="g6.xlarge"),
        at(hours=2),
        at(hours=2, seconds=17),
    )
    run(host(market="spot"), at(hours=3), at(hours=3, minutes=20), ended="interrupted")
    meter(now=at(hours=50))
    raw, rolled = _raw_and_rolled()
    assert raw == rolled
    assert raw["cost_rs"] > 0
    for day in Usage.objects.values_list("day", flat=True).distinct():
        assert _raw_and_rolled(day=day)[0] == _raw_and_rolled(day=day)[1]
    # Incremental upkeep and a full rebuild agree row for row.
    columns = ("day", "project_id", "user_id", "instance_type_id", "market", "cost_rs", "pieces")
    incremental = sorted(DailyRollup.objects.values_list(*columns))
    rollups_rebuild()
    assert sorted(DailyRollup.objects.values_list(*columns)) == incremental


def test_only_the_days_that_changed_are_rolled_up_again(host, run, at, meter):
    run(host(), at(hours=-30), at(hours=-29))
    instance = run(host(), at())
    meter(now=at(hours=1))
    old_day = DailyRollup.objects.get(day=at(hours=-30).date())
    meter(now=at(hours=2))
    assert DailyRollup.objects.get(day=at(hours=-30).date()).pk == old_day.pk  # untouched
    today = DailyRollup.objects.get(
        day=at().date(), user=instance.owner, pieces=1, seconds__gt=3600
    )
    assert today.seconds == 7200
    assert not RollupDelta.objects.exists()


def test_the_meter_task_meters_and_rolls_up(boundary_clock, host, run):
    from billing.tasks import meter_usage

    now = timezone.now()  # the task meters to the wall clock: a host stopped at once
    run(host(), now, now)
    result = meter_usage.apply().get()
    assert result["rows_written"] == 1 and result["rollups_updated"] == 1
    assert DailyRollup.objects.get().cost_rs == 60 * G5


def test_the_rebuild_command_rebuilds_rollups(host, run, at, meter):
    run(host(), at(), at(hours=1))
    meter(now=at(hours=2))
    DailyRollup.objects.all().delete()
    call_command("billing_meter", "--rebuild-rollups", verbosity=0)
    assert DailyRollup.objects.get().cost_rs == 3600 * G5
    assert rollups_refresh() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_passes_and_refreshes_at_once_keep_the_rollups_equal_to_usage(host, run, at, alice, bob):
    """Metering passes and rollup refreshes racing on PostgreSQL: every delta is added once."""
    import threading

    from django.db import connection

    hosts = [run(host(user=(alice, bob)[n % 2]), at(minutes=n)) for n in range(12)]
    errors: list[BaseException] = []

    def work(job) -> None:
        try:
            for _ in range(6):
                job()
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)
        finally:
            connection.close()  # this thread's own connection

    def passes(first_minute: int):
        minutes = iter(range(first_minute, 10_000, 14))  # one iterator per thread
        return lambda: usage_meter(now=at(minutes=next(minutes)))

    jobs = [passes(10), passes(17), rollups_refresh, rollups_refresh]
    threads = [threading.Thread(target=work, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rollups_refresh()
    raw, rolled = _raw_and_rolled()
    assert raw == rolled and raw["cost_rs"] > 0
    assert not RollupDelta.objects.exists()
    assert len(hosts) == Usage.objects.values("instance").distinct().count()
    incremental = _rollup_rows()
    rollups_rebuild()
    assert _rollup_rows() == incremental  # row for row, key for key


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_refresh_that_starts_while_another_runs_adds_nothing_twice(
    host, run, at, meter, monkeypatch
):
    import threading
    import time

    from django.db import connection

    run(host(), at(), at(hours=2))
    meter(now=at(hours=3))
    run(host(), at(hours=30), at(hours=31))  # the next day: new rollup rows to create
    usage_meter(now=at(hours=32))  # deltas pending
    from billing.services import rollups

    add = rollups._rollups_add

    def held(sums):  # the first refresh holds its transaction open while it adds
        if threading.current_thread().name == "first":
            time.sleep(0.5)
        return add(sums)

    monkeypatch.setattr(rollups, "_rollups_add", held)

    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            rollups_refresh()
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)
        finally:
            connection.close()

    first = threading.Thread(target=refresh, name="first")
    second = threading.Thread(target=refresh, name="second")
    first.start()
    time.sleep(0.2)  # the first has read the pending deltas and is writing
    second.start()
    first.join()
    second.join()
    assert errors == []
    raw, rolled = _raw_and_rolled()
    assert raw == rolled
    assert not RollupDelta.objects.exists()


def test_a_gpu_model_renamed_while_a_host_runs_moves_its_rows(host, run, at, meter, catalog):
    run(host(), at())
    meter(now=at(hours=1))
    InstanceType.objects.filter(pk=catalog["g5.xlarge"].pk).update(gpu_model="A10G-24GB")
    meter(now=at(hours=2))
    incremental = _rollup_rows()
    assert {row.gpu_model for row in DailyRollup.objects.all()} == {"A10G-24GB"}
    rollups_rebuild()
    assert _rollup_rows() == incremental
    assert DailyRollup.objects.get().seconds == 7200


def test_deltas_taken_one_at_a_time_give_the_same_rollups(host, run, at, spot_price, alice):
    spot_price("g5.xlarge", "0.3000", at(hours=-1))
    spot_price("g5.xlarge", "0.4000", at(hours=3))
    run(host(), at(), at(hours=30))
    run(host(market="spot"), at(hours=1), at(hours=5), ended="terminated")
    for hour in (2, 6, 26, 31):
        usage_meter(now=at(hours=hour))
    # One delta per transaction; the pass goes on until none is left.
    assert rollups_refresh(batch=1) > 0
    assert not RollupDelta.objects.exists()
    incremental = _rollup_rows()
    rollups_rebuild()
    assert _rollup_rows() == incremental and incremental
