"""Billing timeline fixtures, a plugin of tests/conftest.py: hosts driven through their status
moves at chosen (cloud) times.

Hosts are ordered through order_submit and moved with instance_transition, the real writers, at
times in the future (a transition is never recorded earlier than the last one, and an order's
hosts are created now); metering is then run with an explicit ``now``.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.lib.money import micros
from billing.models import DailyRollup, ListPrice, SpotPrice
from billing.services.metering import usage_meter
from billing.services.rollups import rollups_refresh
from instances.models import Instance
from instances.services import instance_transition

S = Instance.Status


@pytest.fixture
def base(clock) -> datetime:
    """Midnight UTC three days from now, on a frozen clock: every test's timeline starts here.

    Three days, so that the earliest move a test makes (30 h before) still comes after the
    order that created the host, whatever the time of day: a move is never recorded earlier
    than the one before it, and two days from 23:30 left only 24.5 h.
    """
    today = clock.now.astimezone(UTC).date()
    return datetime.combine(today + timedelta(days=3), time(0), tzinfo=UTC)


@pytest.fixture
def at(base):
    def moment(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
        return base + timedelta(hours=hours, minutes=minutes, seconds=seconds)

    return moment


@pytest.fixture
def host(place_order, alice, catalog):
    """A requested host of an order: host(market=..., instance_type=..., user=..., project=...)."""

    def make(*, user=None, market="on_demand", instance_type="g5.xlarge", **overrides):
        order = place_order(
            user or alice, market=market, instance_type=catalog[instance_type], **overrides
        )
        return order.instances.get()

    return make


def _move(instance: Instance, to: str, when: datetime, actor: str = "system:test") -> Instance:
    instance, _ = instance_transition(instance=instance, to=to, reason="test", actor=actor, at=when)
    return instance


@pytest.fixture
def run():
    """Move a host into running at ``start`` and, given ``end``, out of it the way ``ended``
    says: stopped (by its owner), terminated (by its owner), interrupted (spot, by the cloud)."""

    def go(instance: Instance, start: datetime, end: datetime | None = None, ended="stopped"):
        instance.refresh_from_db()
        if instance.status == S.REQUESTED:
            instance = _move(instance, S.PROVISIONING, start - timedelta(seconds=20))
        elif instance.status == S.STOPPED:
            instance = _move(instance, S.STARTING, start - timedelta(seconds=5), "user:alice")
        instance = _move(instance, S.RUNNING, start)
        if end is None:
            return instance
        if ended == "stopped":
            instance = _move(instance, S.STOPPING, end, "user:alice")
            return _move(instance, S.STOPPED, end)
        if ended == "terminated":
            instance = _move(instance, S.TERMINATING, end, "user:alice")
            return _move(instance, S.TERMINATED, end)
        if ended == "interrupted":
            instance = _move(instance, S.INTERRUPTED, end)
            return _move(instance, S.TERMINATED, end)
        raise ValueError(ended)

    return go


@pytest.fixture
def play(host, run, at):
    """A new host of ``market`` through ``runs``: (start s, end s or None, how it ended), in
    seconds from the timeline's start, as the scripts of the billing tests give them."""

    def go(market: str, runs) -> Instance:
        instance = host(market=market)
        for start, end, ended in runs:
            instance = run(
                instance,
                at(seconds=start),
                at(seconds=end) if end is not None else None,
                ended=ended or "stopped",
            )
        return instance

    return go


@pytest.fixture
def meter():
    """One metering pass at ``now`` and the rollups it changed."""

    def go(now: datetime):
        report = usage_meter(now=now)
        rollups_refresh()
        return report

    return go


@pytest.fixture
def spot_price(catalog):
    """Record a spot price of a type in force from a moment (as the refresh would)."""

    def record(name: str, price: str, when: datetime, zone: str = "us-east-1a") -> SpotPrice:
        return SpotPrice.objects.create(
            instance_type=catalog[name],
            region="us-east-1",
            availability_zone=zone,
            price_per_hour=Decimal(price),
            at=when,
        )

    return record


@pytest.fixture
def list_price(catalog):
    """Record an on-demand list price of a type in force from a moment."""

    def record(name: str, price: str, when: datetime) -> ListPrice:
        return ListPrice.objects.create(
            instance_type=catalog[name], price_per_hour=Decimal(price), at=when, source="test"
        )

    return record


@pytest.fixture
def spend(projects, alice, catalog):
    """Put month-to-date spend on a project, as metering and rollups would."""

    def record(dollars: str, *, project=None, market="on_demand"):
        row, _ = DailyRollup.objects.get_or_create(
            day=timezone.now().date(),
            project=project or projects["vision-lab"],
            user=alice,
            instance_type=catalog["g5.xlarge"],
            market=market,
            defaults={
                "gpu_model": "A10G",
                "seconds": 0,
                "billed_seconds": 0,
                "gpu_seconds": 0,
                "cost_rs": 0,
                "list_cost_rs": 0,
                "pieces": 1,
            },
        )
        row.cost_rs += micros(dollars) * 3600
        row.list_cost_rs += micros(dollars) * 3600
        row.save()
        return row

    return record
