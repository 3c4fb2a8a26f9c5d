"""The end of the demo's past: the list price change it shows, and what is going on as the
demo opens (hosts running now, an order waiting for approval, a budget forecast past 80 %)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings

from demo.services.session import Session
from instances import services
from instances.data import list_prices
from instances.models import InstanceType

# Orders placed this long before the demo opens, still running (or waiting) when it does:
# (hours before now, who, project, type, market, hosts, lease hours). The vision-lab training
# run is tried from the largest down, so it takes what is left of the month's budget.
RUNNING_NOW = [
    (5.2, "alice", "vision-lab", "g5.xlarge", "on_demand", 1, 24),
    (3.1, "bob", "vision-lab", "g6.xlarge", "spot", 1, 24),
    (2.4, "carol", "nlp-lab", "p5.48xlarge", "spot", 1, 8),
    (1.3, "carol", "nlp-lab", "g6e.xlarge", "on_demand", 1, 12),
]
TRAINING_RUN = [(2, 72), (1, 72), (1, 24), (1, 8)]  # p4d.24xlarge hosts, lease hours
WAITING = (0.4, "bob", "vision-lab", "p5.48xlarge", "spot", 2, 24)


def price_cut_prepare(cut: tuple[str, Decimal, int]) -> None:
    """Before the history: the type's older, higher list price (the one in force at its first
    instant; the catalog's sync has just recorded today's, at the same second, which this one
    replaces)."""
    name, old_price, _ = cut
    kind = InstanceType.objects.filter(name=name).first()
    if kind is not None:
        kind.on_demand_price_per_hour = old_price
        services.instance_type_save(instance_type=kind)


def price_cut_apply(cut: tuple[str, Decimal, int]) -> None:
    """The day the cloud cut the price: back to the price file's, as the admin would save it."""
    name = cut[0]
    kind = InstanceType.objects.filter(name=name).first()
    listed = list_prices(settings.PORTAL_PRICE_FILE).get(name)
    if kind is not None and listed is not None:
        kind.on_demand_price_per_hour = listed.on_demand
        services.instance_type_save(instance_type=kind)


def present_build(past, now: datetime) -> None:
    """Schedule the last hours of the history on ``past`` (demo.services.history.Past)."""
    number = 100_000
    for hours, user, project, kind, market, count, lease in RUNNING_NOW:
        number += 1
        session = Session(
            number=number,
            start=now - timedelta(hours=hours),
            hours=lease,  # past its end: still running when the demo opens
            project=project,
            user=user,
            instance_type=kind,
            market=market,
            count=count,
            ending="open",
            policy="relaunch_spot" if market == "spot" else "",
        )
        past.at(session.start, lambda s=session: past.order(s))
    past.at(now - timedelta(hours=4), lambda: training_run(past, now))
    hours, user, project, kind, market, count, lease = WAITING
    waiting = Session(
        number=number + 1,
        start=now - timedelta(hours=hours),
        hours=lease,
        project=project,
        user=user,
        instance_type=kind,
        market=market,
        count=count,
        ending="open",
        policy="fallback_on_demand",
    )
    past.at(waiting.start, lambda: past.order(waiting, approve=False))


def training_run(past, now: datetime) -> None:
    """alice's p4d training run: the most hosts and the longest lease vision-lab's budget
    admits, approved by ada when it needs approval."""
    for tried, (count, lease) in enumerate(TRAINING_RUN):
        session = Session(
            number=100_100 + tried,
            start=past.now,
            hours=lease,
            project="vision-lab",
            user="alice",
            instance_type="p4d.24xlarge",
            market="on_demand",
            count=count,
            ending="open",
        )
        if past.order(session):
            return
