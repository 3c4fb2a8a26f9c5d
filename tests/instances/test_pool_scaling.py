"""What moves a pool's desired count: scheduled actions at fixed instants (across a daylight
saving change) and target tracking on simulated GPU utilization."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from instances import services
from instances.lib import cron
from instances.models import Instance, PoolEvent
from tests.instances.pool_helpers import alive, provision_all, readings, settle_terminations

S = Instance.Status
BERLIN = cron.zone("Europe/Berlin")


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- cron, pure --------------------------------------------------------------------------------


def test_nine_in_berlin_is_eight_utc_before_the_spring_change_and_seven_after():
    nine = cron.parse("0 9 * * *")
    runs = cron.next_runs(nine, BERLIN, after=at(2026, 3, 27, 12), count=3)
    assert runs == [at(2026, 3, 28, 8), at(2026, 3, 29, 7), at(2026, 3, 30, 7)]
    runs = cron.next_runs(nine, BERLIN, after=at(2026, 10, 24, 12), count=2)
    assert runs == [at(2026, 10, 25, 8), at(2026, 10, 26, 8)]


def test_a_wall_time_the_change_skips_does_not_happen_and_a_repeated_one_fires_once():
    half_two = cron.parse("30 2 * * *")
    spring = cron.next_runs(half_two, BERLIN, after=at(2026, 3, 28, 12), count=2)
    assert spring == [at(2026, 3, 30, 0, 30), at(2026, 3, 31, 0, 30)]  # none on the 29th
    autumn = cron.next_runs(half_two, BERLIN, after=at(2026, 10, 24, 12), count=2)
    assert autumn == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]


def test_working_days_are_monday_to_friday_and_described_in_words():
    weekdays = cron.parse("0 9 * * 1-5")
    runs = cron.next_runs(weekdays, cron.zone("Asia/Shanghai"), after=at(2026, 11, 20, 2), count=2)
    assert runs == [at(2026, 11, 23, 1), at(2026, 11, 24, 1)]  # Friday 10:00 local -> Monday
    assert cron.describe("0 9 * * 1-5", "Asia/Shanghai") == (
        "At 09:00, Monday through Friday (Asia/Shanghai)"
    )


@pytest.mark.parametrize(
    "expression", ["* * *", "61 * * * *", "0 25 * * *", "0 9 * * funday", "", "0 0 31 2 *"]
)
def test_a_malformed_or_impossible_schedule_is_refused_saying_why(make_pool, alice, expression):
    pool = make_pool()
    with pytest.raises(ValidationError) as refused:
        services.schedule_create(pool=pool, user=alice, cron=expression, desired=2)
    assert refused.value.error_dict["cron"][0].code == "invalid_cron"


def test_an_unknown_time_zone_is_refused(make_pool, alice):
    pool = make_pool()
    with pytest.raises(ValidationError) as refused:
        services.schedule_create(
            pool=pool, user=alice, cron="0 9 * * *", timezone="Mars/Olympus", desired=2
        )
    assert refused.value.error_dict["timezone"][0].code == "unknown_timezone"


# --- schedules in the pass -------------------------------------------------------------------


def test_a_schedule_fires_at_its_wall_clock_time_across_the_spring_change(make_pool, alice, clock):
    clock.move_to(at(2026, 3, 27, 12))
    pool = make_pool(desired=0)
    services.schedule_create(
        pool=pool, user=alice, cron="0 9 * * *", timezone="Europe/Berlin", desired=3
    )
    services.schedule_create(
        pool=pool, user=alice, cron="0 21 * * *", timezone="Europe/Berlin", desired=0
    )

    def desired_at(moment: datetime) -> int:
        clock.move_to(moment)
        services.autoscale()
        pool.refresh_from_db()
        return pool.desired

    assert desired_at(at(2026, 3, 28, 7, 59)) == 0
    assert desired_at(at(2026, 3, 28, 8, 0, 30)) == 3  # 09:00 CET
    assert desired_at(at(2026, 3, 28, 20, 0, 30)) == 0  # 21:00 CET
    assert desired_at(at(2026, 3, 29, 6, 59)) == 0
    assert desired_at(at(2026, 3, 29, 7, 0, 30)) == 3  # 09:00 CEST, an hour earlier in UTC
    assert desired_at(at(2026, 3, 29, 7, 30)) == 3
    assert desired_at(at(2026, 3, 29, 19, 0, 30)) == 0  # 21:00 CEST
    fired = pool.events.filter(kind=PoolEvent.Kind.SCHEDULE).order_by("at")
    # 21:00 on the 27th (after the schedule was made), then two days of 09:00 and 21:00.
    assert fired.count() == 5
    assert "At 09:00 (Europe/Berlin): desired 3" in fired[1].message


def test_a_schedule_never_fires_for_times_before_it_was_made(make_pool, alice, clock):
    clock.move_to(at(2026, 11, 17, 10))
    pool = make_pool(desired=1)
    services.schedule_create(pool=pool, user=alice, cron="0 9 * * *", desired=4)
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 1
    schedule = pool.schedules.get()
    assert services.schedule_next_runs(schedule)[0] == at(2026, 11, 18, 9)


def test_after_a_long_pause_the_action_due_last_wins_whichever_schedule_came_first(
    make_pool, alice, clock
):
    clock.move_to(at(2026, 11, 23, 6))  # a Monday
    pool = make_pool(desired=0)
    # The evening schedule is made first: a pass that applied them in the order they were
    # made would end the day with the morning's 4 hosts running all night.
    services.schedule_create(pool=pool, user=alice, cron="0 20 * * 1-5", desired=0)
    services.schedule_create(pool=pool, user=alice, cron="0 8 * * 1-5", desired=4)
    clock.move_to(at(2026, 11, 23, 21))  # no pass since 06:00: both came due
    report = services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 0 and report.launched == []
    fired = [e.message for e in pool.events.filter(kind=PoolEvent.Kind.SCHEDULE).order_by("pk")]
    assert len(fired) == 2
    assert "(due 2026-11-23 08:00 UTC)" in fired[0] and "(due 2026-11-23 20:00 UTC)" in fired[1]
    # Both ran: the next morning's action fires once, the evening's does not come back.
    clock.move_to(at(2026, 11, 24, 8, 0, 30))
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 4
    assert pool.events.filter(kind=PoolEvent.Kind.SCHEDULE).count() == 3


# --- target tracking -------------------------------------------------------------------------


def test_target_tracking_scales_out_respects_cooldown_and_scales_in_the_idle_hosts(
    make_pool, clock
):
    pool = make_pool(
        desired=2,
        min_size=1,
        target_gpu_utilization=70,
        warmup_minutes=0,
        scale_out_minutes=5,
        scale_in_minutes=5,
        cooldown_minutes=10,
    )
    services.autoscale()
    provision_all()
    first = alive(pool)
    now = clock.now.replace(second=0, microsecond=0)
    readings(first, start=now, minutes=5, utilization=95)
    clock.shift(timedelta(minutes=5, seconds=30))
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 3  # ceil(2 x 95 / 70)
    event = pool.events.get(kind=PoolEvent.Kind.TARGET)
    assert "95 % above the 70 % target for 5 min" in event.message
    provision_all()
    # Still hot a minute later, but within the cooldown: no move.
    now = clock.now.replace(second=0, microsecond=0)
    readings(alive(pool), start=now, minutes=1, utilization=99)
    clock.shift(timedelta(minutes=1))
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 3
    # Then quiet for long enough: back in, ending the idle host first.
    hosts = alive(pool)
    idle = hosts[0]
    clock.shift(timedelta(minutes=10))
    now = clock.now.replace(second=0, microsecond=0)
    readings(
        hosts,
        start=now - timedelta(minutes=5),
        minutes=5,
        utilization=lambda h: 1 if h.pk == idle.pk else 40,
    )
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 2  # ceil(3 x 27 / 70)
    settle_terminations()
    ended = Instance.objects.filter(pool=pool, status=S.TERMINATED)
    assert [h.pk for h in ended] == [idle.pk]


def test_a_pool_just_below_its_target_keeps_its_size_instead_of_flapping(make_pool, clock):
    pool = make_pool(
        desired=3,
        min_size=1,
        target_gpu_utilization=70,
        warmup_minutes=0,
        scale_in_minutes=5,
    )
    services.autoscale()
    provision_all()
    now = clock.now.replace(second=0, microsecond=0)
    readings(alive(pool), start=now, minutes=5, utilization=69)
    clock.shift(timedelta(minutes=5, seconds=30))
    services.autoscale()
    pool.refresh_from_db()
    # ceil(3 x 69 / 70) = 3, the formula in docs/researchers.md (Pools); two hosts would run at
    # 104 %.
    assert pool.desired == 3
    assert not pool.events.filter(kind=PoolEvent.Kind.TARGET).exists()


def test_hosts_being_handed_over_are_not_counted_twice_by_target_tracking(make_pool, clock):
    pool = make_pool(
        desired=2,
        target_gpu_utilization=70,
        warmup_minutes=0,
        scale_out_minutes=5,
        cooldown_minutes=10,
    )
    services.autoscale()
    old = provision_all()
    clock.move_to(min(h.lease_expires_at for h in old) - timedelta(minutes=20))
    services.autoscale()  # their leases end soon: two replacements
    provision_all()
    assert len(alive(pool, status=S.RUNNING)) == 4
    # All four are hot; the pass checks the target before it hands the old ones over, and
    # counts the replacements only.
    now = clock.now.replace(second=0, microsecond=0)
    readings(alive(pool), start=now, minutes=5, utilization=95)
    clock.shift(timedelta(minutes=5, seconds=30))
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 3  # ceil(2 x 95 / 70), not ceil(4 x 95 / 70) = 6


def test_hosts_in_warm_up_do_not_count(make_pool, clock):
    pool = make_pool(desired=1, target_gpu_utilization=50, warmup_minutes=30, scale_out_minutes=3)
    services.autoscale()
    provision_all()
    now = clock.now.replace(second=0, microsecond=0)
    readings(alive(pool), start=now, minutes=3, utilization=100)
    clock.shift(timedelta(minutes=3, seconds=5))
    services.autoscale()
    pool.refresh_from_db()
    assert pool.desired == 1
