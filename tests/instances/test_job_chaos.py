"""Chaos over managed jobs: a real Celery worker SIGKILLed at random points while spot jobs
run, each kill aimed at one of two windows: between a job's host running and its job started,
and during a recovery (the cloud took a job's host back, and reconcile, the job pass and the
replacement's launch are the worker's to do). The cloud is the simulated one, taking hosts back
as ``simulated_cloud interrupt`` does; beat is this test, sending the periodic tasks to the
worker every second.

The test speaks for each host's agent through the agent API (the views portal_agent.py calls,
with the host's own credential, as tests/instances/test_jobs.py does), so it chooses when an
agent asks, starts and exits relative to each kill; an agent lives while its cloud host runs
and dies with it. (tests/instances/test_job_execution.py runs the real agent process.)

Then the portal settles, and: no job ever had two runs live at once, no host was handed a
job's run twice, every job ended as its scenario says (succeeded, failed, cancelled) and no
host is left. ``pytest -s`` prints how often the kills landed in each window.
"""

from __future__ import annotations

import base64
import random
import re
import statistics
import threading
import time
from collections import Counter

import pytest
from django.db.models import Count
from rest_framework.test import APIClient

from instances import tasks
from instances.models import Image, Instance, Job, JobRun, SimulatedHost
from instances.providers.simulated import SimulatedProvider
from instances.services.jobs import job_submit
from instances.services.telemetry import agent_secret
from tests.workers import Worker, purge_queues, trial_count

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.real_clock,  # real workers stamp rows with the wall clock (tests/clock.py)
    pytest.mark.django_db(transaction=True),
]

J = Job.Status
TRIALS = trial_count("JOB_CHAOS_TRIALS", 8)
# Each cloud call arrives 50 ms late and answers 300 ms after it acted; hosts boot in 1 s, so
# a launch spans a few tasks (provision, then sync) and a kill can land inside one.
WORKER_ENV = {
    "PORTAL_SIMULATED_API_LATENCY_SECONDS": "0.05",
    "PORTAL_SIMULATED_REPLY_LATENCY_SECONDS": "0.3",
    "PORTAL_SIMULATED_BOOT_SECONDS": "1",
    "PORTAL_PROVISION_RETRY_BACKOFF_SECONDS": "0",
    # Lost work is sent again after 3 s (production: 2 minutes), as often as it takes.
    "PORTAL_RECONCILE_STUCK_SECONDS": "3",
    "PORTAL_RECONCILE_MAX_RETRIES": "100",
    "PORTAL_ORPHAN_GRACE_SECONDS": "5",
    "PORTAL_SPOT_EVENTS_QUEUE_URL": "",
    "PORTAL_CHECKPOINT_S3_PREFIX": "",
}
TICK = 0.25  # the agents' pace: one call each per tick
BEAT = 1.0  # reconcile, the job pass and the spot warnings, as beat sends them
EPOCHS = 3  # log chunks a run sends before it exits
HOST_RUNNING = "host running, job not started"
RECOVERING = "during a recovery"
# What each job is to do, in turn: its end is what the assertions expect.
SCENARIOS = ("succeeds", "succeeds", "fails", "cancelled")
ENDS = {"succeeds": J.SUCCEEDED, "fails": J.FAILED, "cancelled": J.CANCELLED}


class HostAgent:
    """What portal_agent.py does for one host, one call per tick: ask for a run, start it,
    send its output, stop it when told, report its exit (143 when stopped, as a job that
    saves on SIGTERM does)."""

    def __init__(self, host: Instance, job_id: str, scenario: str, errors: list):
        self.api = APIClient()
        self.api.credentials(HTTP_AUTHORIZATION=f"Agent {agent_secret(host)}")
        self.base = f"/api/v1/instances/{host.pk}/job/"
        self.job_id, self.scenario = job_id, scenario
        self.errors = errors
        self.run: dict | None = None
        self.held = ""  # "before asking" or "after asking": held back across a kill
        self.started = self.stop = False
        self.sent = self.offset = 0

    def _post(self, step: str, **body):
        answer = self.api.post(f"{self.base}{step}/", body, format="json")
        if answer.status_code not in (200, 409):
            self.errors.append(f"{step}/ answered {answer.status_code}: {answer.content[:200]}")
        return answer

    def tick(self) -> None:
        if self.held and (self.run is None or not self.started):
            if self.run is None and self.held == "after asking":
                self._ask()
            return
        if self.run is None:
            self._ask()
            return
        ref = {"job": self.run["job"], "run": self.run["run"]}
        if not self.started:
            answer = self._post("started", **ref, pid=4000 + self.run["run"])
            if answer.status_code == 409:
                self.run = None
                return
            self.started, self.stop = True, answer.json()["stop"]
            return
        if self.stop or self.sent >= EPOCHS:
            code = 143 if self.stop else (3 if self.scenario == "fails" else 0)
            self._post("exit", **ref, exit_code=code, stopped=self.stop)
            self.run = None
            return
        line = f"run {ref['run']} epoch {self.sent + 1}\n".encode()
        answer = self._post("log", **ref, offset=self.offset, data=base64.b64encode(line).decode())
        if answer.status_code == 409:
            self.run = None
            return
        self.offset, self.stop = answer.json()["offset"], answer.json()["stop"]
        self.sent += 1

    def _ask(self) -> None:
        answer = self.api.get(self.base)
        if answer.status_code == 200:
            self.run, self.started, self.stop, self.sent, self.offset = (
                answer.json(),
                False,
                answer.json()["stop"],
                0,
                0,
            )
        elif answer.status_code != 204:
            self.errors.append(f"job/ answered {answer.status_code}: {answer.content[:200]}")


class Workers:
    """Two workers, as production runs several: a kill takes the one with tasks in hand (the
    other carries on), and its supervisor starts another in the background."""

    SIZE = 2

    def __init__(self):
        self.live: list[Worker] = []
        self.starting = 0
        self.started = 0
        self.output: list[str] = []
        self.start_seconds: list[float] = []

    def fill(self, *, wait: bool = False) -> None:
        threads = []
        while len(self.live) + self.starting < self.SIZE:
            self.started += 1
            worker = Worker(
                **WORKER_ENV, name=str(self.started), PORTAL_SIMULATED_SEED=str(self.started)
            )
            self.starting += 1

            def start(worker=worker) -> None:
                began = time.monotonic()
                try:
                    self.live.append(worker.start(timeout=60))
                    self.start_seconds.append(time.monotonic() - began)
                finally:
                    self.starting -= 1

            threads.append(threading.Thread(target=start, daemon=True))
            threads[-1].start()
        if wait:
            for thread in threads:
                thread.join()

    @property
    def up(self) -> bool:
        return bool(self.live)

    @property
    def full(self) -> bool:
        return len(self.live) == self.SIZE

    @staticmethod
    def in_hand(worker: Worker) -> list[str]:
        """The tasks a worker has received and not finished."""
        lines = "".join(worker.output)
        received = {
            task_id: name
            for name, task_id in re.findall(r"Task (\S+)\[([0-9a-f-]+)\] received", lines)
        }
        done = set(re.findall(r"Task \S+\[([0-9a-f-]+)\] (?:succeeded|retry|raised)", lines))
        return [name.rsplit(".", 1)[1] for task_id, name in received.items() if task_id not in done]

    def kill_busy(self, rng: random.Random) -> list[str]:
        """SIGKILL the worker with the most tasks in hand (any, if none has one), start its
        successor; returns the tasks it took with it."""
        busiest = max(len(self.in_hand(worker)) for worker in self.live)
        worker = rng.choice([w for w in self.live if len(self.in_hand(w)) == busiest])
        self.live.remove(worker)
        worker.kill()
        self.output.append("".join(worker.output))
        self.fill()
        return self.in_hand(worker)

    def stop(self) -> None:
        while self.starting:
            time.sleep(0.1)
        for worker in self.live:
            worker.stop()
            self.output.append("".join(worker.output))
        self.live = []


def live_cloud_hosts() -> dict[str, SimulatedHost]:
    """The cloud's hosts that run (an agent lives on each), by the instance they are tagged with."""
    return {
        host.portal_instance: host
        for host in SimulatedHost.objects.filter(state=SimulatedHost.State.RUNNING)
    }


@pytest.fixture
def world(settings, tmp_path, alice, catalog):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_SIMULATED_BOOT_SECONDS = 1
    WORKER_ENV["PORTAL_CHECKPOINT_LOCAL_DIR"] = str(tmp_path / "checkpoints")
    purge_queues()
    workers = Workers()
    yield workers
    workers.stop()
    purge_queues()


def test_a_worker_killed_between_host_and_start_and_during_recovery_leaves_no_job_astray(
    world, alice, projects, catalog, api_as
):
    rng = random.Random(20261203)
    workers = world
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    scenario_of: dict[str, str] = {}
    agents: dict[str, HostAgent] = {}
    gone: set[str] = set()  # hosts the cloud took: their agents are dead
    errors: list[str] = []
    two_live_runs: list[str] = []
    interrupted: Counter[str] = Counter()  # by job: its hosts the cloud took while it was live
    recovering_since: dict[str, float] = {}
    cancelled: set[str] = set()
    held_for: dict[str, str] = {}  # job -> how its agent is held back
    next_beat = 0.0
    tick_seconds: list[float] = []

    def submit(*, held: str) -> Job:
        scenario = SCENARIOS[len(scenario_of) % len(SCENARIOS)]
        job = job_submit(
            requester=alice,
            project=projects["vision-lab"],
            instance_type=catalog["g5.xlarge" if len(scenario_of) % 2 else "g6.xlarge"],
            image=image,
            market="spot",
            name=f"chaos-{len(scenario_of)}",
            command="python train.py",
            time_limit_minutes=30,
        )
        scenario_of[str(job.pk)] = scenario
        hold(job, held)
        return job

    def hold(job: Job, how: str) -> None:
        held_for[str(job.pk)] = how
        for agent in agents.values():
            if agent.job_id == str(job.pk):
                agent.held = how

    def release(job: Job) -> None:
        hold(job, "")

    def tick() -> None:
        nonlocal next_beat
        began = time.monotonic()
        running = live_cloud_hosts()
        for host in Instance.objects.filter(order__job__isnull=False, cloud_id__isnull=False):
            key = str(host.pk)
            if key not in running:
                if key in agents:
                    gone.add(key)
                    agents.pop(key)
                continue
            if key in gone:
                continue
            job_id = str(Job.objects.filter(order_id=host.order_id).values_list("pk", flat=True)[0])
            agent = agents.get(key)
            if agent is None:
                agent = agents[key] = HostAgent(host, job_id, scenario_of[job_id], errors)
                agent.held = held_for.get(job_id, "")
            agent.tick()
            if scenario_of[job_id] == "cancelled" and agent.sent >= 2 and job_id not in cancelled:
                cancelled.add(job_id)
                answer = api_as(alice).post(f"/api/v1/jobs/{job_id}/cancel/")
                assert answer.status_code in (200, 409), answer.content
        doubled = (
            JobRun.objects.filter(ended_at__isnull=True)
            .values("job")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
        )
        two_live_runs.extend(str(row["job"]) for row in doubled)
        for job_id in list(recovering_since):
            job = Job.objects.get(pk=job_id)
            if job.is_ended or (job.status == J.RUNNING and str(job.host_id) not in gone):
                recovering_since.pop(job_id)
        if workers.up and time.monotonic() >= next_beat:
            for task in (tasks.reconcile, tasks.pass_jobs, tasks.drain_spot_events):
                task.delay()
            next_beat = time.monotonic() + BEAT
        tick_seconds.append(time.monotonic() - began)
        time.sleep(max(0.0, TICK - (time.monotonic() - began)))

    def tick_until(predicate, seconds: float):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            tick()
        return None

    def take_back(host_id: str) -> None:
        """The cloud takes a job's spot host back now, unwarned (``simulated_cloud interrupt``)."""
        host = Instance.objects.get(pk=host_id)
        job = Job.objects.get(order_id=host.order_id)
        SimulatedProvider().interrupt(host.cloud_id)
        gone.add(host_id)
        agents.pop(host_id, None)
        if not job.is_ended:
            interrupted[str(job.pk)] += 1
            recovering_since[str(job.pk)] = time.monotonic()

    def windows_now() -> set[str]:
        landed = set()
        if recovering_since:
            landed.add(RECOVERING)
        waiting = Job.objects.filter(status__in=[J.PENDING, J.STARTING]).values_list(
            "order_id", flat=True
        )
        if Instance.objects.filter(
            order_id__in=list(waiting),
            status=Instance.Status.RUNNING,
            spot_interruption_at__isnull=True,
        ).exists():
            landed.add(HOST_RUNNING)
        return landed

    started = time.monotonic()
    landed: Counter[str] = Counter()
    cut_short: dict[str, Counter[str]] = {HOST_RUNNING: Counter(), RECOVERING: Counter()}
    workers.fill(wait=True)
    try:
        job = submit(held="before asking")
        for trial in range(TRIALS):
            # The trial's job was submitted as the last kill's worker died, its agent held
            # back: its host launches while the next worker starts.
            aim = HOST_RUNNING if trial % 2 == 0 else RECOVERING

            def host_running(job=job):
                return (
                    Instance.objects.filter(order_id=job.order_id, status=Instance.Status.RUNNING)
                    .values_list("pk", flat=True)
                    .first()
                )

            host_id = tick_until(lambda: workers.full and host_running(), 60)
            if aim == HOST_RUNNING:
                # Its host runs, its agent is held back (before or after it asked for the run)
                # until the worker is dead.
                hold(job, rng.choice(["before asking", "after asking"]))
                tick_until(lambda: False, rng.uniform(0.0, 0.5))
            else:
                # The cloud takes its host back once the job runs; beat sends its tasks at once,
                # and the worker dies while reconcile, the job pass or the replacement's launch
                # runs.
                release(job)

                def job_running(job=job):
                    return (
                        Job.objects.filter(pk=job.pk, status=J.RUNNING)
                        .values_list("host_id", flat=True)
                        .first()
                    )

                host_id = tick_until(job_running, 30)
                if host_id:
                    take_back(str(host_id))
                    for task in (tasks.reconcile, tasks.pass_jobs):
                        task.delay()
                tick_until(lambda: False, rng.uniform(0.0, 1.5))
            landed.update(windows_now())
            cut_short[aim].update(workers.kill_busy(rng))
            if aim == HOST_RUNNING and host_id and trial % 4 == 0:
                take_back(str(host_id))  # taken back before its job could start
            release(job)
            job = submit(held="before asking")
        release(job)  # the job submitted after the last kill runs with no kill at all
        trials_took = time.monotonic() - started

        # --- no more kills: a worker and beat until every job has ended and its hosts too ---
        settle_started = time.monotonic()
        tick_until(lambda: workers.up, 60)

        def settled():
            return not Job.objects.exclude(status__in=Job.ENDED).exists() and not (
                Instance.objects.filter(status__in=Instance.LIVE).exists()
            )

        tick_until(settled, 90)
        settle_took = time.monotonic() - settle_started
    finally:
        workers.stop()

    jobs = list(Job.objects.all())
    ends = Counter((scenario_of[str(job.pk)], job.status) for job in jobs)
    runs_per_host = (
        JobRun.objects.values("job", "host").annotate(n=Count("id")).filter(n__gt=1).count()
    )
    live_cloud = SimulatedHost.objects.exclude(state__in=["shutting-down", "terminated"])
    recoveries = sum(job.recoveries for job in jobs)
    with_recoveries = sum(1 for job in jobs if job.recoveries)
    print(
        f"\njob chaos: {TRIALS} SIGKILLs in {trials_took:.0f} s over {len(jobs)} spot jobs; "
        f"kills landed {HOST_RUNNING}: {landed[HOST_RUNNING]}/{TRIALS}, "
        f"{RECOVERING}: {landed[RECOVERING]}/{TRIALS}; tasks the killed worker had in hand, "
        f"by the window aimed at: { {aim: dict(cut) for aim, cut in cut_short.items()} }\n"
        f"hosts taken back {sum(interrupted.values())}, recoveries {recoveries} "
        f"({with_recoveries} jobs); settled in {settle_took:.1f} s; ends by scenario "
        f"{dict(ends)}\nworkers took {statistics.median(workers.start_seconds):.1f} s to start "
        f"(median); agents' tick {statistics.median(tick_seconds):.2f} s (median); jobs with two "
        f"live runs {len(set(two_live_runs))}; hosts handed one job's run twice "
        f"{runs_per_host}; cloud hosts left {live_cloud.count()}"
    )
    assert errors == []
    assert two_live_runs == [], "a job ran on two hosts at once"
    assert runs_per_host == 0, "a host was handed the same job twice"
    for job in jobs:
        scenario = scenario_of[str(job.pk)]
        assert job.status == ENDS[scenario], (
            scenario,
            job.status,
            job.status_reason,
            list(job.events.order_by("at", "id").values_list("new_status", "reason")),
            [
                (host.name, host.status, host.status_reason, str(host.replaces_id)[:8])
                for host in job.order.instances.order_by("created_at")
            ],
        )
        runs = list(job.runs.all())
        assert all(run.ended_at and run.outcome for run in runs), (
            "a run never ended",
            scenario,
            [(run.number, run.outcome, run.host.status) for run in runs],
        )
        if scenario == "succeeds":
            assert [run.outcome for run in runs][-1] == JobRun.Outcome.SUCCEEDED
            assert len(runs) == job.recoveries + 1 and job.recoveries <= interrupted[str(job.pk)]
        if scenario == "fails":
            assert job.exit_code == 3 and "exit code 3" in job.status_reason
    assert not Instance.objects.filter(status__in=Instance.LIVE).exists(), "hosts stuck live"
    assert live_cloud.count() == 0, "orphan hosts in the cloud"
    assert landed[HOST_RUNNING] >= 1 and landed[RECOVERING] >= 1, dict(landed)
    assert with_recoveries >= 1, "no job recovered: the interruptions did not bite"
