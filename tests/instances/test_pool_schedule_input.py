"""What a pool schedule accepts as its time zone and its cron: IANA names only (not the
machine's "localtime"), and a cron in ASCII (full-width digits are refused, not stored)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from instances import services
from instances.lib import cron
from instances.models import PoolSchedule


@pytest.mark.parametrize("name", ["localtime", "Factory", "posixrules"])
def test_a_zone_file_that_names_no_place_is_not_a_time_zone(name):
    with pytest.raises(ValidationError) as refused:
        cron.zone(name)
    assert refused.value.code == "unknown_timezone"


def test_iana_names_are_time_zones():
    assert str(cron.zone("Asia/Shanghai")) == "Asia/Shanghai"
    assert str(cron.zone("UTC")) == "UTC"


def test_a_schedule_in_localtime_answers_400_and_is_not_stored(api_as, alice, make_pool):
    pool = make_pool()
    answer = api_as(alice).post(
        f"/api/v1/pools/{pool.pk}/schedules/",
        {"cron": "0 9 * * 1-5", "timezone": "localtime", "desired": 2},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_timezone"
    assert "is not an IANA time zone" in answer.json()["detail"]
    assert not PoolSchedule.objects.filter(pool=pool).exists()


def test_a_cron_in_full_width_digits_answers_400_and_is_not_stored(api_as, alice, make_pool):
    pool = make_pool()
    answer = api_as(alice).post(
        f"/api/v1/pools/{pool.pk}/schedules/",
        {"cron": "０ ９ * * 1-5", "desired": 2},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid_cron"
    assert "U+FF10" in answer.json()["detail"]
    assert not PoolSchedule.objects.filter(pool=pool).exists()


def test_an_ideographic_space_between_fields_is_only_a_space(make_pool, alice):
    schedule = services.schedule_create(
        pool=make_pool(), user=alice, cron="0\u30009 * * 1-5", desired=2
    )
    assert schedule.cron == "0 9 * * 1-5"
