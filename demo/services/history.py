"""The demo's past: 60 days of hosts played through the portal's own services on a moved clock.

Nothing here writes a domain row itself. The clock is moved (time-machine) to each moment of a
generated script, and at that moment the script does what a person or the beat would have done
then: order (``order_submit``; an admin approves what needs approval), stop and terminate
(``instance_request_*``), and the loops: spot prices, spot warnings, reconcile, telemetry and
the idle stop, lease expiry, metering, rollups and budget checks. The tasks those services send
are held (``enqueue_held``) and done at once by the services the worker would run
(``instance_provision``, ``instance_cloud_action``), so the simulated cloud's times, and so the
metered seconds, are those of the moved clock. Over its last days the autoscaler runs too, so
the demo's pool has followed its schedule.

The script comes from a seeded random generator and the day the history ends, so it is the
same on every machine that day. Played once: a second run finds its orders and says unchanged.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import time_machine
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test.utils import override_settings

from billing.services.budgets import budgets_check
from billing.services.metering import usage_meter
from billing.services.prices import spot_prices_refresh
from billing.services.rollups import rollups_refresh
from demo.services.present import present_build, price_cut_apply, price_cut_prepare
from demo.services.sample_cur import sample_cur_import
from demo.services.session import Session
from instances import services
from instances.models import ACTIONS, Image, Instance, InstanceType, Order
from instances.providers import get_provider
from instances.providers.base import ProviderTransientError
from instances.providers.gpu_profile import profile_of
from instances.selectors.pools import CHART_HOURS
from instances.services.queue import enqueue_held
from instances.services.telemetry import telemetry_collect, telemetry_compact
from portal.lib.errors import PortalError
from portal.models import Project, User

DAYS = 60
KEY_PREFIX = "demo-history-"
SEED = 2026
TERMINAL = (Instance.Status.TERMINATED, Instance.Status.FAILED)
# What a session is: the type, the market, how long it runs (hours), how often it is picked.
# Few, long sessions on large hosts rather than many small ones: each host costs the script
# a launch, polls and an end, and the history must play in well under a minute.
MENUS = {
    "vision-lab": [
        ("p4d.24xlarge", "on_demand", (3, 8), 1, 3.0),
        ("p4d.24xlarge", "on_demand", (3, 5), 2, 0.25),  # 16 GPUs: waits for approval
        ("g6e.xlarge", "on_demand", (16, 40), 1, 1.0),
        ("g5.xlarge", "on_demand", (12, 36), 1, 1.0),
        ("g6.xlarge", "spot", (24, 60), 1, 1.0),
        ("p5.48xlarge", "spot", (3, 6), 1, 1.0),
    ],
    "nlp-lab": [
        ("p5.48xlarge", "spot", (3, 6), 1, 0.8),
        ("g5.xlarge", "on_demand", (12, 36), 1, 1.0),
        ("g6.xlarge", "on_demand", (12, 40), 1, 1.0),
        ("g6e.xlarge", "spot", (12, 36), 1, 1.0),
    ],
}
PEOPLE = {"vision-lab": ["alice", "bob"], "nlp-lab": ["carol"]}
# Dollars a project means to spend on a weekday (weekends: 40 %): vision-lab passes 80 % of
# its $5,000 late in a month, nlp-lab passes 80 % of its $2,000.
DAILY_TARGET = {"vision-lab": 120.0, "nlp-lab": 45.0}
SPOT_SHARE = 0.35  # what a spot hour costs against on-demand, for planning only
# The list price change the history shows: p4d.24xlarge cheaper from this day (days ago).
PRICE_CUT = ("p4d.24xlarge", Decimal("37.6885"), 24)
IDLE_STOPS = 5
IDLE = {"vision-lab"}  # the projects seed_demo gives an idle policy
BEAT_DAYS = 3
# The autoscaler's passes over the last hours of the past, so the demo's pool (services/pools.py)
# opens with its schedule at work on its chart and in its events: four days hold at least one
# working day's 09:00 to 21:00 in Berlin whatever day the demo opens.
POOL_HOURS = 96
POOL_PASS = timedelta(minutes=5)
# Before the chart's window (CHART_HOURS) the passes leave events only: one every half hour
# keeps the schedule's moves and launches at a sixth of the passes.
POOL_PASS_BEFORE_CHART = timedelta(minutes=30)
INTERRUPTIONS = 8


def history_start(now: datetime) -> datetime:
    """Midnight UTC, DAYS days before today."""
    return datetime.combine(now.astimezone(UTC).date() - timedelta(days=DAYS), time(0), tzinfo=UTC)


def history_exists() -> bool:
    return Order.objects.filter(idempotency_key__startswith=KEY_PREFIX).exists()


def plan(start: datetime, end: datetime, prices: dict[str, Decimal]) -> list[Session]:
    """The sessions of every day from ``start`` to the day before ``end``: seeded, so the same
    days give the same script."""
    rng = random.Random(f"{SEED}:{start.date()}")  # noqa: S311 - a repeatable script, not a secret
    sessions: list[Session] = []
    budget_left = {"idle": IDLE_STOPS, "interrupt": INTERRUPTIONS}
    day = start
    number = itertools.count(1)
    while day + timedelta(days=1) <= end - timedelta(hours=12):
        weekend = day.weekday() >= 5
        for project, menu in MENUS.items():
            target = DAILY_TARGET[project] * (0.4 if weekend else 1.0) * rng.uniform(0.7, 1.3)
            planned = 0.0
            while planned < target:
                name, market, (low, high), count, _ = rng.choices(menu, [m[4] for m in menu])[0]
                hours = round(rng.uniform(low, high), 2)
                begin = day + timedelta(hours=rng.uniform(7, 17), seconds=rng.randrange(60))
                if begin + timedelta(hours=hours + 2) > end:
                    break
                rate = float(prices[name]) * (SPOT_SHARE if market == "spot" else 1.0)
                planned += rate * hours * count
                ending = _ending(rng, market, budget_left, day, start, idle_stop=project in IDLE)
                policy = rng.choice(["relaunch_spot", "notify"]) if market == "spot" else ""
                if ending == "interrupt" and budget_left["interrupt"] % 2 == 0:
                    # Every other interruption relaunches, whatever the dice said: the past
                    # always shows a replacement, on any day it is played.
                    policy = "relaunch_spot"
                sessions.append(
                    Session(
                        number=next(number),
                        start=begin,
                        hours=hours,
                        project=project,
                        user=rng.choice(PEOPLE[project]),
                        instance_type=name,
                        market=market,
                        count=count,
                        ending=ending,
                        policy=policy,
                    )
                )
        day += timedelta(days=1)
    return sessions


def _ending(
    rng: random.Random, market: str, left: dict, day: datetime, start: datetime, *, idle_stop: bool
) -> str:
    roll = rng.random()
    # The rarer endings, spread over the whole history rather than all in its first days.
    spread = (day - start).days % 6 == 3
    if market == "spot":
        if spread and roll < 0.6 and left["interrupt"]:
            left["interrupt"] -= 1
            return "interrupt"
        return "terminate"
    if idle_stop and spread and roll < 0.5 and left["idle"]:
        left["idle"] -= 1
        return "idle"
    return "terminate" if roll < 0.7 else "stop" if roll < 0.85 else "lease"


class Past:
    """Plays a script on a moved clock: steps in time order, the loops between them."""

    def __init__(self, traveller, held: list, *, out: Callable[[str], None]) -> None:
        self.traveller = traveller
        self.held = held
        self.out = out
        self.steps: list = []
        self.sequence = itertools.count()
        self.provider = get_provider()
        self.boot = timedelta(seconds=max(1, settings.PORTAL_SIMULATED_BOOT_SECONDS) + 1)
        self.stats: Counter = Counter()
        self.now: datetime | None = None
        self.people = {user.username: user for user in User.objects.all()}
        self.projects = {project.slug: project for project in Project.objects.all()}
        self.types = {kind.name: kind for kind in InstanceType.objects.all()}
        self.image = Image.objects.get(name="tf-2.20-cuda12.5")

    # --- the clock and the worker ------------------------------------------------------------

    def at(self, when: datetime, do: Callable[[], None]) -> None:
        heapq.heappush(self.steps, (when, next(self.sequence), do))

    def play(self, until: datetime) -> None:
        while self.steps and self.steps[0][0] <= until:
            when, _, do = heapq.heappop(self.steps)
            self.move(when)
            do()
            self.work()

    def move(self, when: datetime) -> None:
        if self.now is None or when > self.now:
            self.traveller.move_to(when)
            self.now = when

    def work(self) -> None:
        """Do the tasks the services sent, as the worker would, now."""
        while self.held:
            name, args = self.held.pop(0)
            instance_id = args[0]
            action = next((a for a, step in ACTIONS.items() if step.task == name), None)
            try:
                if action is not None:
                    services.instance_cloud_action(instance_id=instance_id, action=action)
                else:  # provisioning, the only other task services send
                    services.instance_provision(instance_id=instance_id)
                    self._busy(instance_id)
            except ProviderTransientError as error:
                services.instance_fail(
                    instance_id=instance_id,
                    reason=services.failure_reason(Instance.objects.get(pk=instance_id), error),
                )
                self.stats["failed launches"] += 1
                continue
            self.at(self.now + self.boot, lambda pk=instance_id: self.sync(pk))

    def sync(self, instance_id, polls: int = 0) -> None:
        instance = services.instance_sync(instance_id=instance_id)
        if instance.status in Instance.MOVING and polls < 5:
            self.at(self.now + self.boot, lambda: self.sync(instance_id, polls + 1))

    def _busy(self, instance_id) -> None:
        """Hosts of the past were busy (the script says which went idle): their GPUs read
        busy whenever telemetry runs."""
        cloud_id = Instance.objects.get(pk=instance_id).cloud_id
        if cloud_id:
            self.provider.set_gpu_profile(cloud_id, profile_of("busy", now=self.now))

    # --- the beat -------------------------------------------------------------------------

    def daily(self, day: datetime) -> None:
        """What beat does all the time, every BEAT_DAYS days here: prices, leases, metering,
        rollups, budgets, telemetry compaction (each catches up on the days since)."""
        self.stats["spot prices"] += spot_prices_refresh()
        services.leases_expire(now=self.now)
        self.work()
        usage_meter(now=self.now)
        rollups_refresh()
        self.stats["budget alerts"] += len(budgets_check(now=self.now).alerts)
        telemetry_compact(now=self.now)
        then = day + timedelta(days=BEAT_DAYS)
        self.at(then + timedelta(minutes=5), lambda: self.daily(then))

    # --- a session ------------------------------------------------------------------------

    def order(self, session: Session, *, approve: bool = True) -> bool:
        """Place the session's order; schedule its approval and its end. False if refused."""
        user = self.people[session.user]
        try:
            order, _ = services.order_submit(
                idempotency_key=f"{KEY_PREFIX}{session.number}",
                requester=user,
                project=self.projects[session.project],
                instance_type=self.types[session.instance_type],
                image=self.image,
                market=session.market,
                count=session.count,
                lease_hours=session.lease_hours,
                ssh_public_key=demo_ssh_key(session.user),
                interruption_policy=session.policy,
            )
        except (PortalError, ValidationError):
            self.stats["orders refused"] += 1  # over budget or quota: refused, as it would be
            return False
        self.stats["orders"] += 1
        end = session.start + timedelta(hours=session.hours)
        if order.status == Order.Status.PENDING_APPROVAL and approve:
            self.at(self.now + timedelta(minutes=25), lambda: self.approve(order))
        if session.ending == "idle":
            self.at(end - timedelta(minutes=70), lambda: self.go_idle(order))
        elif session.ending == "interrupt":
            self.at(end, lambda: self.interrupt(order))
            self.at(end + timedelta(hours=3), lambda: self.finish(order, user, "terminate"))
        elif session.ending == "stop":
            self.at(end, lambda: self.finish(order, user, "stop"))
            self.at(end + timedelta(hours=14), lambda: self.finish(order, user, "terminate"))
        elif session.ending == "lease":
            self.at(end + timedelta(minutes=1), lambda: services.leases_expire(now=self.now))
        elif session.ending == "terminate":
            self.at(end, lambda: self.finish(order, user, "terminate"))
        return True  # "open": still running (or waiting) when the demo opens

    def approve(self, order: Order) -> None:
        try:
            services.order_approve(
                order=order, user=self.people["ada"], reason="Planned training run"
            )
            self.stats["approvals"] += 1
        except (PortalError, ValidationError):
            self.stats["orders refused"] += 1

    def live(self, order: Order):
        return Instance.objects.filter(order=order).exclude(status__in=TERMINAL)

    def finish(self, order: Order, user: User, action: str) -> None:
        for instance in self.live(order):
            if action == "stop" and instance.status != Instance.Status.RUNNING:
                continue
            try:
                services.instance_request_action(instance=instance, user=user, action=action)
            except PortalError:
                continue  # e.g. a spot host cannot stop: its owner terminates it later

    def interrupt(self, order: Order) -> None:
        """The market takes a spot host back: its warning, heard by the spot events loop,
        then reconcile finds it gone two minutes later."""
        instance = self.live(order).filter(status=Instance.Status.RUNNING).first()
        if instance is None or not instance.cloud_id:
            return
        self.provider.warn(instance.cloud_id)
        services.spot_events_drain()
        self.stats["spot interruptions"] += 1
        lead = timedelta(seconds=settings.PORTAL_SPOT_WARNING_LEAD_SECONDS, minutes=1)
        self.at(self.now + lead, lambda: services.reconcile(now=self.now))

    def go_idle(self, order: Order) -> None:
        """Its owner left the host idle: telemetry every minute, the idle stop's pass after it,
        until the policy stops the host."""
        instance = self.live(order).filter(status=Instance.Status.RUNNING).first()
        if instance is None or not instance.cloud_id:
            return
        self.provider.set_gpu_profile(instance.cloud_id, profile_of("idle", now=self.now))
        for minute in range(1, 75):
            self.at(self.now + timedelta(minutes=minute), self.watch)
        owner = self.people[order.requester.username]
        self.at(self.now + timedelta(hours=10), lambda: self.finish(order, owner, "terminate"))

    def watch(self) -> None:
        telemetry_collect(now=self.now)
        self.stats["idle stops"] += len(services.idle_check(now=self.now).stopped)

    def autoscale(self, until: datetime) -> None:
        """Beat's autoscaler pass, every POOL_PASS until ``until``: the pools follow their
        schedules, their launches and ends done as the worker would."""
        report = services.autoscale(now=self.now)
        self.stats["pool hosts launched"] += len(report.launched)
        self.work()
        charted = self.now >= until - timedelta(hours=CHART_HOURS)
        step = POOL_PASS if charted else POOL_PASS_BEFORE_CHART
        if self.now + step < until:
            self.at(self.now + step, lambda: self.autoscale(until))


def demo_ssh_key(username: str) -> str:
    """A person's demo public key: an Ed25519 key drawn from their name (no private key is kept
    anywhere; nobody can sign in to a demo host with it)."""
    import hashlib

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = hashlib.sha256(f"gpu-portal-demo:{username}".encode()).digest()
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    raw = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{raw.decode()} {username}@demo"


def history_build(*, now: datetime, out: Callable[[str], None], before: Callable[[], None]):
    """Play DAYS days up to ``now``; ``before`` runs first at the history's first instant (the
    demo's people, projects and catalog come into being then). Returns the counts of what
    happened. One transaction: a failure leaves no half-built past."""

    start = history_start(now)
    # The services' INFO lines of the past (replacements, retries) would bury the summary.
    logging.disable(logging.INFO)
    try:
        return _play(start, now, out, before)
    finally:
        logging.disable(logging.NOTSET)


def _play(start: datetime, now: datetime, out: Callable[[str], None], before: Callable[[], None]):
    # The past's notices stay in the portal; nobody is emailed about them now.
    with (
        override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"),
        time_machine.travel(start, tick=False) as traveller,
        enqueue_held() as held,
        transaction.atomic(),
    ):
        before()
        price_cut_prepare(PRICE_CUT)
        prices = {kind.name: kind.on_demand_price_per_hour for kind in InstanceType.objects.all()}
        past = Past(traveller, held, out=out)
        past.move(start + timedelta(seconds=1))
        for session in plan(start, now, prices):
            past.at(session.start, lambda s=session: past.order(s))
        cut_day = start + timedelta(days=DAYS - PRICE_CUT[2], hours=9)
        past.at(cut_day, lambda: price_cut_apply(PRICE_CUT))
        past.at(start + timedelta(minutes=5), lambda: past.daily(start))
        past.at(now - timedelta(hours=POOL_HOURS), lambda: past.autoscale(now))
        present_build(past, now)
        past.play(now)
        past.move(now)
        usage_meter(now=now)
        rollups_refresh()
        past.stats["budget alerts"] += len(budgets_check(now=now).alerts)
        past.stats["reconciled hosts"] += sample_cur_import(now=now)
    return past.stats
