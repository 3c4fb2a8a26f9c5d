"""Chaos: the simulated cloud hurts the portal the way EC2 can, and the portal takes it.

1. The faults themselves (fast): a reply that comes late or never after the cloud acted, tokens
   not honoured, throttling bursts; all repeatable for a seed, all off unless set.
2. The provisioner under them (fast): a lost or throttled launch is retried into one host.
3. A real worker process SIGKILLed at random points of two dozen launches with every fault on
   (PostgreSQL and Redis): one reconcile pass leaves no instance with two live hosts, then the
   portal settles with no orphans and nothing stuck. ``pytest -s`` prints its figures.
"""

from __future__ import annotations

import dataclasses
import io
import random
import re
import time
from collections import Counter

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db.models import Count

from instances import services, tasks
from instances.data import image_rows
from instances.models import Instance, InstanceEvent, SimulatedHost
from instances.providers import simulated
from instances.providers.base import (
    ProviderTransientError,
)
from instances.providers.faults import FAULT_DICE, Faults
from instances.providers.simulated import SimulatedProvider
from tests.instances.test_provider_contract import a_launch_request
from tests.workers import Worker, purge_queues, trial_count

S = Instance.Status
UNKNOWN_ID = "i-0123456789abcdef0"


@pytest.fixture
def faults(settings):
    """Turn faults of the simulated cloud on for one test, from the start of the dice."""
    FAULT_DICE.reset()

    def turn_on(**values) -> None:
        for name, value in values.items():
            setattr(settings, f"PORTAL_SIMULATED_{name.upper()}", value)

    yield turn_on
    FAULT_DICE.reset()


@pytest.fixture
def launch_request(db):
    image_id = image_rows()[0]["provider_image_ids"]["us-east-1"]
    return lambda **changes: a_launch_request(**{"image_id": image_id, **changes})


def live_hosts_of(instance_uuid) -> list[SimulatedHost]:
    return list(
        SimulatedHost.objects.filter(portal_instance=str(instance_uuid)).exclude(
            state__in=["shutting-down", "terminated"]
        )
    )


# --- 1. the faults ------------------------------------------------------------------------------


def test_every_fault_is_off_unless_set(launch_request, monkeypatch):
    FAULT_DICE.reset()
    slept: list[float] = []
    monkeypatch.setattr(simulated.time, "sleep", slept.append)
    provider = SimulatedProvider()
    assert provider.faults == Faults()
    request = launch_request()
    hosts = {provider.launch(request).cloud_id for _ in range(3)}
    for _ in range(50):
        provider.describe(hosts)
        provider.find_tagged()
    provider.stop(next(iter(hosts)))
    provider.start(next(iter(hosts)))
    assert len(hosts) == 1  # the token honoured, as EC2 does
    assert slept == []  # no latency before or after
    assert FAULT_DICE.calls == 0  # nothing rolled


def test_a_slow_reply_comes_after_the_host_exists(faults, launch_request, monkeypatch, settings):
    """The old latency sleeps before the cloud acts; the reply latency after it, which is the
    window in which a worker can die with a host launched and not recorded."""
    settings.PORTAL_SIMULATED_API_LATENCY_SECONDS = 0.05
    faults(reply_latency_seconds=0.4)
    slept: list[tuple[float, int]] = []
    monkeypatch.setattr(
        simulated.time, "sleep", lambda s: slept.append((s, SimulatedHost.objects.count()))
    )
    host = SimulatedProvider().launch(launch_request())
    assert slept == [(0.05, 0), (0.4, 1)]
    assert SimulatedHost.objects.get().cloud_id == host.cloud_id


def test_a_lost_reply_times_out_after_the_launch_took_effect(faults, launch_request):
    faults(lost_reply_rate=1.0)
    request = launch_request()
    with pytest.raises(ProviderTransientError) as lost:
        SimulatedProvider().launch(request)
    assert lost.value.code == "ReadTimeoutError" and lost.value.outcome_unknown
    (host,) = live_hosts_of(request.instance_uuid)
    assert host.client_token == request.client_token
    # The token is honoured: asking again (reply lost again or not) makes no second host.
    with pytest.raises(ProviderTransientError):
        SimulatedProvider().launch(request)
    faults(lost_reply_rate=0.0)
    assert SimulatedProvider().launch(request).cloud_id == host.cloud_id
    assert len(live_hosts_of(request.instance_uuid)) == 1


@pytest.mark.parametrize(
    ("action", "before", "after"),
    [
        ("stop", "running", "stopped"),
        ("start", "stopped", "running"),
        ("terminate", "running", "terminated"),
    ],
)
def test_stop_start_and_terminate_take_effect_before_their_reply_is_lost(
    faults, launch_request, action, before, after
):
    host = SimulatedProvider().launch(launch_request())
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(state=before)
    faults(lost_reply_rate=1.0)
    with pytest.raises(ProviderTransientError) as lost:
        getattr(SimulatedProvider(), action)(host.cloud_id)
    assert lost.value.code == "ReadTimeoutError"
    assert SimulatedHost.objects.get(cloud_id=host.cloud_id).state == after


def test_reads_are_never_lost_only_slow(faults, launch_request):
    host = SimulatedProvider().launch(launch_request())
    faults(lost_reply_rate=1.0)
    assert set(SimulatedProvider().describe([host.cloud_id])) == {host.cloud_id}
    assert [h.cloud_id for h in SimulatedProvider().find_tagged()] == [host.cloud_id]


def test_a_cloud_that_ignores_tokens_launches_another_host_for_the_same_token(
    faults, launch_request
):
    faults(ignore_client_tokens=True)
    request = launch_request()
    provider = SimulatedProvider()
    first, second = provider.launch(request), provider.launch(request)
    assert first.cloud_id != second.cloud_id
    assert {h.cloud_id for h in provider.find_tagged(request.instance_uuid)} == {
        first.cloud_id,
        second.cloud_id,
    }
    # As moto: not even other parameters under the same token are refused.
    third = provider.launch(dataclasses.replace(request, instance_type="g6.xlarge"))
    assert third.instance_type == "g6.xlarge"
    assert len(live_hosts_of(request.instance_uuid)) == 3


def test_a_throttling_burst_refuses_a_stretch_of_calls_that_do_nothing(faults, launch_request):
    faults(throttle_rate=1.0, throttle_burst_calls=4)
    request = launch_request()
    with pytest.raises(ProviderTransientError) as throttled:
        SimulatedProvider().launch(request)
    assert throttled.value.code == "RequestLimitExceeded"
    assert not throttled.value.outcome_unknown  # refused: nothing happened
    # The burst outlasts the provider object (each task builds its own), not the process.
    faults(throttle_rate=1e-12)
    outcomes = []
    for _ in range(5):
        try:
            SimulatedProvider().launch(request)
            outcomes.append("launched")
        except ProviderTransientError as error:
            outcomes.append(error.code)
    assert outcomes == ["RequestLimitExceeded"] * 3 + ["launched", "launched"]
    assert len(live_hosts_of(request.instance_uuid)) == 1  # the refused calls did nothing


def fault_pattern(settings, seed: int, calls: int = 80) -> str:
    """T for a throttled call, L for a lost reply, . for a clean one."""
    settings.PORTAL_SIMULATED_SEED = seed
    FAULT_DICE.reset()
    provider = SimulatedProvider()
    pattern = ""
    for _ in range(calls):
        try:
            provider.terminate(UNKNOWN_ID)
            pattern += "."
        except ProviderTransientError as error:
            pattern += "T" if error.code == "RequestLimitExceeded" else "L"
    return pattern


def test_faults_repeat_for_the_same_seed_and_differ_for_another(faults, settings, db):
    faults(lost_reply_rate=0.3, throttle_rate=0.05, throttle_burst_calls=3)
    first = fault_pattern(settings, seed=11)
    assert fault_pattern(settings, seed=11) == first
    assert fault_pattern(settings, seed=12) != first
    assert {"T", "L", "."} <= set(first)
    # Throttling comes in bursts of three calls (two bursts may touch).
    assert all(len(run) % 3 == 0 for run in re.findall("T+", first.rstrip("T"))), first


@pytest.mark.parametrize(
    ("name", "value"),
    [("LOST_REPLY_RATE", 1.5), ("THROTTLE_RATE", -0.1), ("THROTTLE_BURST_CALLS", 0)],
)
def test_a_fault_setting_out_of_range_is_refused_by_name(settings, name, value):
    setattr(settings, f"PORTAL_SIMULATED_{name}", value)
    with pytest.raises(ImproperlyConfigured, match=f"PORTAL_SIMULATED_{name}"):
        SimulatedProvider()


def test_the_cloud_console_says_which_faults_are_on_and_lists_hosts_through_them(
    faults, launch_request
):
    host = SimulatedProvider().launch(launch_request())
    faults(
        reply_latency_seconds=0.0,
        lost_reply_rate=0.25,
        ignore_client_tokens=True,
        throttle_rate=1.0,
        throttle_burst_calls=3,
    )
    shown = io.StringIO()
    call_command("simulated_cloud", "faults", stdout=shown)
    assert re.findall(r"^(.+?)\s{2,}(.+)$", shown.getvalue(), re.M) == [
        ("reply latency after the cloud acted", "0 s"),
        ("replies lost after the call took effect", "25%"),
        ("client tokens", "ignored"),
        ("throttling bursts", "100% of calls start one of 3 calls"),
    ]
    # The API is throttled; the console is not.
    with pytest.raises(ProviderTransientError):
        SimulatedProvider().describe([host.cloud_id])
    listed = io.StringIO()
    call_command("simulated_cloud", "list", stdout=listed)
    assert host.cloud_id in listed.getvalue()


# --- 2. the provisioner under the faults -------------------------------------------------------


@pytest.fixture
def requested(place_order, alice):
    return place_order(alice).instances.get()


@pytest.mark.parametrize("ignore_tokens", [False, True], ids=["tokens-honoured", "tokens-ignored"])
def test_a_launch_whose_reply_is_lost_is_retried_into_the_same_host(
    faults, requested, ignore_tokens
):
    """The retry looks for the tagged host before it launches, so even a cloud that ignores the
    token (moto) makes one host."""
    faults(lost_reply_rate=1.0, ignore_client_tokens=ignore_tokens)
    assert tasks.provision_instance.apply(args=[str(requested.pk)]).get() == S.RUNNING
    (host,) = live_hosts_of(requested.pk)
    requested.refresh_from_db()
    assert requested.cloud_id == host.cloud_id
    assert SimulatedHost.objects.count() == 1


def test_when_the_retry_cannot_see_the_host_yet_the_honoured_token_returns_it(
    faults, requested, monkeypatch
):
    """EC2's listing lags a launch: the retry finds nothing tagged and launches again with the
    same token, which the cloud answers with the host it already made."""
    faults(lost_reply_rate=1.0)
    with pytest.raises(ProviderTransientError):
        services.instance_provision(instance_id=requested.pk)
    (host,) = live_hosts_of(requested.pk)
    faults(lost_reply_rate=0.0)
    monkeypatch.setattr(SimulatedProvider, "find_tagged", lambda self, uuid=None: [])
    row = services.instance_provision(instance_id=requested.pk)
    assert (row.cloud_id, row.status) == (host.cloud_id, S.RUNNING)
    assert SimulatedHost.objects.count() == 1


def test_throttled_provisioning_is_retried_and_launches_once(
    faults, requested, settings, monkeypatch
):
    settings.PORTAL_PROVISION_MAX_RETRIES = 20
    settings.PORTAL_SIMULATED_SEED = 5
    faults(throttle_rate=0.3, throttle_burst_calls=3, lost_reply_rate=0.3)
    rolled = []
    real_roll = FAULT_DICE.roll

    def roll(seed, fault_settings):
        rolled.append(real_roll(seed, fault_settings))
        return rolled[-1]

    monkeypatch.setattr(FAULT_DICE, "roll", roll)
    assert tasks.provision_instance.apply(args=[str(requested.pk)]).get() == S.RUNNING
    assert any(throttled for throttled, _ in rolled), "the seed threw no throttling burst"
    assert len(live_hosts_of(requested.pk)) == 1


# --- 3. a real worker, killed at random points, with every fault on ----------------------------

TRIALS = trial_count("CHAOS_TRIALS", 24)
# Every cloud call takes 50 ms to arrive and its reply 400 ms after the cloud acted: a window
# of 400 ms in each launch with the host made and not yet recorded.
FAULTS = {
    "PORTAL_SIMULATED_API_LATENCY_SECONDS": 0.05,
    "PORTAL_SIMULATED_REPLY_LATENCY_SECONDS": 0.4,
    "PORTAL_SIMULATED_LOST_REPLY_RATE": 0.25,
    "PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS": True,
    "PORTAL_SIMULATED_THROTTLE_RATE": 0.1,
    "PORTAL_SIMULATED_THROTTLE_BURST_CALLS": 3,
    "PORTAL_SIMULATED_BOOT_SECONDS": 1,
}
WORKER_ENV = {
    **{
        name: str(int(value) if isinstance(value, bool) else value)
        for name, value in FAULTS.items()
    },
    "PORTAL_PROVISION_RETRY_BACKOFF_SECONDS": "0",
    "PORTAL_PROVISION_MAX_RETRIES": "12",
}
WINDOW = "cloud launched, row not recorded"


def hosts_per_row() -> dict[str, int]:
    """Live (not shutting down or terminated) cloud hosts per tagged instance."""
    rows = (
        SimulatedHost.objects.exclude(state__in=["shutting-down", "terminated"])
        .exclude(portal_instance="")
        .values("portal_instance")
        .annotate(n=Count("id"))
    )
    return {row["portal_instance"]: row["n"] for row in rows}


def phase_of(instance: Instance) -> str:
    """Where the provisioning of ``instance`` stood when its worker died."""
    instance.refresh_from_db()
    if instance.status == S.REQUESTED:
        return "before the task started"
    if instance.cloud_id is None:
        return WINDOW if live_hosts_of(instance.pk) else "before the launch"
    if instance.status == S.PROVISIONING:
        return "recorded, booting"
    return f"recorded, {instance.status}"


def poll(predicate, timeout: float, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def reconcile_pass(**merged: list) -> tuple[services.ReconcileReport, int]:
    """One reconcile pass as the beat task makes it: the cloud may throttle it, and the task
    retries until the pass is through (nothing deferred). Returns the report and the tries."""
    total = services.ReconcileReport()
    for attempt in range(1, 30):
        try:
            report = services.reconcile()
        except ProviderTransientError:
            time.sleep(0.2)
            continue
        for name, values in vars(report).items():
            if name != "deferred":
                getattr(total, name).extend(values)
        if not report.deferred:
            return total, attempt
        time.sleep(0.2)
    raise AssertionError("the reconcile pass never got through the throttling")


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.real_clock  # real workers stamp rows with the wall clock (tests/clock.py)
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_anywhere_under_every_fault_leaves_one_host_per_instance(
    place_order, alice, catalog, settings, capsys
):
    rng = random.Random(20261130)
    purge_queues()
    started = time.monotonic()
    phases: Counter[str] = Counter()
    sent_twice = 0
    outputs: list[str] = []
    # --- kill a worker mid-provisioning, again and again ---
    for trial in range(TRIALS):
        # A seed per trial: each fresh worker process would otherwise replay the same faults.
        worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED=str(1000 + trial)).start()
        instance_type = catalog["g5.xlarge" if trial % 2 else "g6.xlarge"]
        instance = place_order(alice, instance_type=instance_type).instances.get()
        if rng.random() < 0.5:
            # The task delivered twice (a re-send racing the first, a redelivery): two workers
            # launch at once, and a cloud that ignores the token makes two hosts.
            tasks.provision_instance.delay(str(instance.pk))
            sent_twice += 1
        if trial % 2:
            time.sleep(rng.uniform(0.0, 2.5))
        else:
            # Aim at the window: the host appears in the cloud, the reply takes 400 ms.
            poll(lambda instance=instance: live_hosts_of(instance.pk), timeout=8)
            time.sleep(rng.uniform(0.0, 0.3))
        worker.kill()
        outputs.extend(worker.output)
        phases[phase_of(instance)] += 1
    trials_took = time.monotonic() - started
    doubled = {key: n for key, n in hosts_per_row().items() if n > 1}

    # --- one reconcile pass, faults on, nothing else running, orphan grace as in production ---
    for name, value in FAULTS.items():  # the same faults in this process, which reconciles
        setattr(settings, name, value)
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 1
    FAULT_DICE.reset()
    first, first_tries = reconcile_pass()
    after_one_pass = max(hosts_per_row().values(), default=0)
    notes = Counter(
        reason.split(" host ")[0]
        for reason in InstanceEvent.objects.filter(
            actor="system:reconcile", reason__contains=" host "
        ).values_list("reason", flat=True)
    )

    # --- a worker, beat's reconcile every 1.5 s, until every instance is running or failed ---
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 15
    settle_started = time.monotonic()
    worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED="999").start()
    later = services.ReconcileReport()
    try:
        while time.monotonic() - settle_started < 240:
            report, _ = reconcile_pass()
            for name, values in vars(report).items():
                getattr(later, name).extend(values)
            statuses = set(Instance.objects.values_list("status", flat=True))
            if statuses <= {S.RUNNING, S.FAILED}:
                break
            time.sleep(1.5)
        settle_time = time.monotonic() - settle_started
    finally:
        worker.stop()
        outputs.extend(worker.output)
    # --- and one more pass with the worker gone: what is left ---
    final_report, _ = reconcile_pass()
    purge_queues()
    FAULT_DICE.reset()

    final = Counter(Instance.objects.values_list("status", flat=True))
    live_rows = {
        str(pk)
        for pk in Instance.objects.filter(status__in=Instance.LIVE).values_list("pk", flat=True)
    }
    per_row = hosts_per_row()
    orphans = sorted(set(per_row) - live_rows)
    made = SimulatedHost.objects.exclude(portal_instance="").count()
    log = "".join(outputs)
    with capsys.disabled():
        print(
            f"\nchaos: {TRIALS} SIGKILLs in {trials_took:.0f} s, task sent twice {sent_twice}x; "
            f"killed while: {dict(phases)}; in the window {phases[WINDOW]}/{TRIALS}\n"
            f"faults seen by the workers: throttled {log.count('call throttled')}, "
            f"replies lost {log.count('reply lost')}\n"
            f"cloud hosts made {made} for {TRIALS} instances; instances with two live hosts "
            f"after the kills {len(doubled)} ({sum(doubled.values()) - len(doubled)} extra hosts)\n"
            f"first reconcile pass ({first_tries} tries): doubles terminated "
            f"{len(first.doubles_terminated)}, adopted {len(first.adopted)}, re-enqueued "
            f"{len(first.enqueued)}, orphans {len(first.orphans_terminated)}; most live hosts "
            f"for one instance after it: {after_one_pass}; timeline notes {dict(notes)}\n"
            f"settled in {settle_time:.1f} s (doubles terminated meanwhile "
            f"{len(later.doubles_terminated)}, adopted {len(later.adopted)}); last pass: "
            f"doubles {len(final_report.doubles_terminated)}, orphans "
            f"{len(final_report.orphans_terminated)}; final {dict(final)}; "
            f"orphans left {len(orphans)}; instances with two live hosts "
            f"{sum(1 for n in per_row.values() if n > 1)}"
        )
    assert phases[WINDOW] >= 1, "no kill landed between the launch and its record"
    assert doubled, "no instance was ever given two hosts: the faults did not bite"
    assert after_one_pass <= 1
    assert len(first.doubles_terminated) == sum(doubled.values()) - len(doubled)
    assert notes["terminated duplicate"] == len(first.doubles_terminated)
    assert max(per_row.values(), default=0) <= 1
    assert orphans == []
    assert set(final) <= {S.RUNNING, S.FAILED}, "instances stuck"
    assert sum(final.values()) == TRIALS
    assert all(per_row.get(str(pk)) == 1 for pk in live_rows), "a live row without its host"
