"""A pool's schedules are capped (PORTAL_POOL_MAX_SCHEDULES) and read in bounded time: their
next runs come from cronsim's jumps and the next run cached on the row, not from a walk in
quarter hours (a cron that fires only on 29 February walked about five years of them)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from instances import services
from instances.lib import cron
from instances.models import PoolSchedule
from portal.lib.errors import Conflict

LEAP_DAY = "0 6 29 2 *"


def test_a_pool_takes_no_more_schedules_than_the_setting_allows(make_pool, alice, settings, api_as):
    settings.PORTAL_POOL_MAX_SCHEDULES = 2
    pool = make_pool()
    for hour in (8, 20):
        services.schedule_create(pool=pool, user=alice, cron=f"0 {hour} * * *", desired=1)
    with pytest.raises(Conflict) as refused:
        services.schedule_create(pool=pool, user=alice, cron="0 12 * * *", desired=1)
    assert refused.value.code == "too_many_schedules"
    answer = api_as(alice).post(
        f"/api/v1/pools/{pool.pk}/schedules/", {"cron": "0 12 * * *", "desired": 1}, format="json"
    )
    assert answer.status_code == 409
    assert answer.json()["code"] == "too_many_schedules"
    assert "2 schedules, the most a pool may have" in answer.json()["detail"]
    assert PoolSchedule.objects.filter(pool=pool).count() == 2


def test_a_schedule_keeps_its_next_run_and_moves_it_when_it_fires(make_pool, alice, clock):
    pool = make_pool()
    schedule = services.schedule_create(pool=pool, user=alice, cron=LEAP_DAY, desired=1)
    assert schedule.next_run_at.isoformat() == "2028-02-29T06:00:00+00:00"
    clock.move_to(schedule.next_run_at)
    services.autoscale()
    schedule.refresh_from_db()
    assert schedule.next_run_at.isoformat() == "2032-02-29T06:00:00+00:00"


def _read_everything(client, pool) -> tuple[int, int]:
    """Queries and cron jumps of the pool's API detail, its page and its htmx panel."""
    jumps = 0

    class CountedCronSim(cron.CronSim):
        def __next__(self):
            nonlocal jumps
            jumps += 1
            return super().__next__()

    with (
        mock.patch.object(cron, "CronSim", CountedCronSim),
        CaptureQueriesContext(connection) as queries,
    ):
        assert client.get(f"/api/v1/pools/{pool.pk}/").status_code == 200
        assert client.get(f"/pools/{pool.pk}/").status_code == 200
        assert client.get(f"/pools/{pool.pk}/panel/").status_code == 200
    return len(queries), jumps


def test_a_pool_with_the_most_leap_day_schedules_is_read_in_bounded_queries_and_jumps(
    make_pool, alice, settings, client, clock
):
    settings.PORTAL_POOL_MAX_SCHEDULES = 20
    pool = make_pool()
    services.schedule_create(pool=pool, user=alice, cron=LEAP_DAY, desired=1)
    client.force_login(alice)
    one_queries, one_jumps = _read_everything(client, pool)
    for minute in range(1, 20):
        services.schedule_create(pool=pool, user=alice, cron=f"{minute} 6 29 2 *", desired=1)
    queries, jumps = _read_everything(client, pool)
    assert queries == one_queries
    # Three reads, each showing three runs a schedule: the cached one and two jumps.
    assert one_jumps <= 3 * 2
    assert jumps <= 20 * 3 * 2
