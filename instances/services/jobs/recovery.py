"""instances/services/jobs/recovery.py: a job outlives its hosts. When a run ends by an
interruption or a lost host, the job moves to ``recovering`` and its next run waits for the
replacement host that the spot recovery (instances/services/spot_recovery.py) launches for its
order: another zone first, on-demand where the job's market says so (a cluster job's lost node
alone, with its rank; the next run starts on every node). A run's own failure the job retries
restarts on the same host. The job pass (jobs_pass) repairs what no agent reported:
hosts lost under a run, orders that were refused, time limits, kept hosts whose time is up."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db import transaction
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from instances.models import Instance, InterruptionPolicy, Job, JobMarket, JobRun, Order
from instances.services.hosts import instances_end
from instances.services.jobs.lifecycle import ACTOR, job_host_release, job_note, job_transition
from instances.services.spot_recovery import REFUSED, replacement_start

# The order ended without hosts: the job ends the same way.
ORDER_ENDED = {
    Order.Status.REJECTED: Job.Status.FAILED,
    Order.Status.EXPIRED: Job.Status.FAILED,
    Order.Status.CANCELLED: Job.Status.CANCELLED,
}
LIVE_JOB = (Job.Status.PENDING, Job.Status.STARTING, Job.Status.RUNNING, Job.Status.RECOVERING)
RUNS = (Job.Status.STARTING, Job.Status.RUNNING)  # a run is handed to the job's host


def job_recover(
    *,
    job: Job,
    host: Instance,
    reason: str,
    interruption: bool = False,
    restart: bool = False,
    counts: bool = False,
) -> Job:
    """Move the job to ``recovering`` for its next run. An interruption or a lost host counts
    as a recovery (up to max_recoveries) and needs a replacement host; a restart (``counts``:
    one of max_restarts) runs again on the same host."""
    if restart:
        job, _ = job_transition(
            job=job,
            to=Job.Status.RECOVERING,
            reason=reason,
            actor=ACTOR,
            host=host,
            tell=False,  # its own retry, as the owner asked: the job's timeline says so
            restarts=job.restarts + (1 if counts else 0),
        )
        return job
    if job.max_recoveries is not None and job.recoveries >= job.max_recoveries:
        job, _ = job_transition(
            job=job,
            to=Job.Status.FAILED,
            reason=f"{reason}; its {job.max_recoveries} recoveries are used up",
            actor=ACTOR,
            host=host,
        )
        return job
    job, _ = job_transition(
        job=job,
        to=Job.Status.RECOVERING,
        reason=reason,
        actor=ACTOR,
        host=host,
        recoveries=job.recoveries + 1,
    )
    return _replace(job, host, interruption=interruption)


def _replace(job: Job, host: Instance, *, interruption: bool = False) -> Job:
    """Start the replacement of ``host`` for a recovering job (the recovery counted already);
    the job fails when none can start. A cluster node its owner stopped ends first (the job
    runs on the replacement; the stopped node would hold its quota and disk)."""
    if host.rank is not None and host.status in (Instance.Status.STOPPING, Instance.Status.STOPPED):
        instances_end([host], reason=f"job {job.name} replaces this stopped node", actor=ACTOR)
    replacement = replacement_start(
        instance_id=host.pk,
        why="interruption warning" if interruption else "job recovery",
        # An on-demand job's order has no interruption policy; its job's is "on-demand again".
        policy=InterruptionPolicy.FALLBACK_ON_DEMAND if job.market == JobMarket.ON_DEMAND else None,
    )
    if replacement is None and _being_taken_back(host):
        # Refused while the warned host still counts against the quota (or budget): the job
        # pass tries again once the cloud has taken it (the no_live_host rule).
        job_note(
            job=job,
            note=f"no replacement host yet ({_refusal(host)}); it is tried again once "
            f"{host.name} is gone",
            host=host,
        )
    elif replacement is None:
        job, _ = job_transition(
            job=job,
            to=Job.Status.FAILED,
            reason=f"no replacement host for the recovery: {_refusal(host)}",
            actor=ACTOR,
            host=host,
        )
    elif replacement.rank is not None:
        job_note(
            job=job,
            note=f"host {replacement.name} replaces rank {replacement.rank}; the next run starts "
            f"on all {job.nodes} nodes once it runs",
            host=replacement,
        )
    else:
        job_note(job=job, note=f"recovers on host {replacement.name}", host=replacement)
    return job


# The refusals a warned host's leaving lifts: it counts against the quota and the budget's
# running hosts until the cloud takes it (their sentences, from quota_check and budget_check).
LIFTED_WHEN_GONE = ("Quota exceeded", "Budget exceeded")


def _being_taken_back(host: Instance) -> bool:
    """A host the cloud warned it takes back, not yet gone, whose replacement was refused by a
    limit that it still holds: the replacement may start once it is gone."""
    host.refresh_from_db(fields=["status", "spot_warning_at"])
    taken = host.spot_warning_at is not None and host.status in Instance.LIVE
    return taken and _refusal(host).startswith(LIFTED_WHEN_GONE)


def _refusal(host: Instance) -> str:
    """Why the spot recovery launched no replacement (its latest note on the host)."""
    note = host.events.filter(reason__startswith=REFUSED).order_by("-at", "-id").first()
    return note.reason.removeprefix(REFUSED) if note else "the order's policy launches none."


def jobs_pass(*, now=None) -> dict[str, int]:
    """Repair what no agent said: returns how many jobs each rule moved. The live jobs are
    screened in three queries whatever their number (_rule on what they read); only those a
    rule holds for are locked, read again and repaired."""
    now = now or timezone.now()
    moved = {"order_ended": 0, "host_lost": 0, "no_host": 0, "time_limit": 0, "released": 0}
    moved["stale_runs"] = _stale_runs_end(now)
    live = list(
        Job.objects.filter(status__in=LIVE_JOB)
        .select_related("order")
        .only("status", "started_at", "time_limit_minutes", "order__status")
    )
    waiting = [job.order_id for job in live if job.status not in RUNS]
    hosts: dict = defaultdict(list)
    for host in Instance.objects.filter(order_id__in=waiting).only("order_id", "status", "rank"):
        hosts[host.order_id].append(host)
    lost = _lost_ranks([job.pk for job in live if job.status in RUNS])
    for screened in live:
        if _rule(screened, now, hosts[screened.order_id], lost) is None:
            continue
        with transaction.atomic():
            job = (
                Job.objects.select_for_update(of=("self",))
                .select_related("order")
                .get(pk=screened.pk)
            )
            if job.is_ended:
                continue
            mine = list(job.order.instances.all())
            rule = _rule(job, now, mine, _lost_ranks([job.pk]))
            rule = _repair(job, now, rule, mine)
            if rule:
                moved[rule] += 1
    for job in Job.objects.filter(status=Job.Status.FAILED, keep_host_until__lte=now):
        job_host_release(job)
        moved["released"] += 1
    return moved


# A run that lost its node: closed as lost by the host's end, or not succeeded on a host that
# is no longer running (open, or stopped there: its owner stopped or ended the host).
LOST_RUN = Q(outcome=JobRun.Outcome.LOST) | (
    ~Q(outcome=JobRun.Outcome.SUCCEEDED) & ~Q(host__status=Instance.Status.RUNNING)
)
# A run left open this long after its job stopped running (past its grace): its agent is gone
# with the stop unreported, and the run no longer holds back the next one.
STALE_RUN_AFTER = timedelta(minutes=5)


def _lost_ranks(job_ids: list) -> set:
    """The jobs whose current run (its last number) lost a node (LOST_RUN; one query)."""
    if not job_ids:
        return set()
    last = JobRun.objects.filter(job=OuterRef("job")).order_by("-number").values("number")[:1]
    return set(
        JobRun.objects.filter(job_id__in=job_ids, number=Subquery(last))
        .filter(LOST_RUN)
        .values_list("job_id", flat=True)
    )


def _stale_runs_end(now) -> int:
    """End as stopped the runs still open whose job left starting and running more than its
    grace and STALE_RUN_AFTER ago (a cluster job's next run waits for them). The runs past
    STALE_RUN_AFTER are few; each job's grace is added in Python (SQLite, the demo's database,
    cannot multiply a duration by a column)."""
    open_runs = JobRun.objects.filter(
        ended_at__isnull=True, job__status__in=(Job.Status.PENDING, Job.Status.RECOVERING)
    )
    stale = [
        run.pk
        for run in open_runs.filter(job__status_changed_at__lt=now - STALE_RUN_AFTER)
        .select_related("job")
        .only("pk", "job__status_changed_at", "job__grace_seconds")
        if run.job.status_changed_at
        < now - STALE_RUN_AFTER - timedelta(seconds=run.job.grace_seconds)
    ]
    return open_runs.filter(pk__in=stale).update(ended_at=now, outcome=JobRun.Outcome.STOPPED)


# A cluster node that can take a run again: not ending, and not stopped (a stopped node of a
# waiting cluster job is replaced, or the cluster would never be whole).
NODE_USABLE = Instance.LIVE - {
    Instance.Status.STOPPING,
    Instance.Status.STOPPED,
    Instance.Status.TERMINATING,
    Instance.Status.INTERRUPTED,
}


def _dead_rank(hosts: list[Instance]) -> list[Instance] | None:
    """The hosts of the first rank (a job of one host: the only one) whose every host ended
    (a cluster's: none usable), or None while each rank has one."""
    ranks: dict = defaultdict(list)
    for host in hosts:
        ranks[host.rank].append(host)
    for rank in sorted(ranks, key=lambda rank: -1 if rank is None else rank):
        alive = Instance.LIVE if rank is None else NODE_USABLE
        if not any(host.status in alive for host in ranks[rank]):
            return ranks[rank]
    return None


def _rule(job: Job, now, hosts: list[Instance], lost: set) -> str | None:
    """Which repair the job needs now, if any, from the job, its order, its host, its order's
    hosts and the jobs whose run lost a node (read only)."""
    order = job.order
    if job.status == Job.Status.PENDING and order.status in ORDER_ENDED:
        return "order_ended"
    if job.started_at and now >= job.started_at + timedelta(minutes=job.time_limit_minutes):
        return "time_limit"
    if job.status in RUNS:
        # Its run was handed to running hosts: one that is no longer running (taken back,
        # stopped, ended) took the run with it (LOST_RUN).
        return "host_lost" if job.pk in lost else None
    if order.status not in (Order.Status.PLACED, Order.Status.APPROVED):
        return None
    if hosts and _dead_rank(hosts) is not None:
        # Every host of the order (of one rank of its cluster) ended before the job could run.
        return "no_live_host"
    return None


def _newest_dead(hosts: list[Instance]) -> Instance:
    """The newest host of the order's first dead rank (_dead_rank)."""
    return max(_dead_rank(hosts) or hosts, key=lambda h: (h.created_at, str(h.pk)))


def _lost_runs(job: Job) -> list[JobRun]:
    """The runs of the job's current run that lost their node (LOST_RUN), in rank order."""
    last = job.runs.order_by("-number").values_list("number", flat=True).first()
    return list(
        job.runs.filter(number=last).filter(LOST_RUN).select_related("host").order_by("rank")
    )


def _repair(job: Job, now, rule: str | None, hosts: list[Instance]) -> str | None:
    """Do what ``rule`` says for the (locked) job; returns the counter it moves."""
    order = job.order
    if rule == "order_ended":
        job_transition(
            job=job,
            to=ORDER_ENDED[order.status],
            reason=f"its order was {order.get_status_display().lower()}"
            + (f": {order.decision_reason}" if order.decision_reason else ""),
            actor=ACTOR,
        )
        return "order_ended"
    if rule == "time_limit":
        job_transition(
            job=job,
            to=Job.Status.FAILED,
            reason=f"its time limit of {job.time_limit_minutes} minutes was reached",
            actor=ACTOR,
        )
        return "time_limit"
    if rule == "host_lost":
        lost = _lost_runs(job)
        # (A host that ended closed its run as it did: JobRunQuerySet.end_with_host.)
        JobRun.objects.filter(pk__in=[run.pk for run in lost], ended_at__isnull=True).update(
            ended_at=now, outcome=JobRun.Outcome.LOST
        )
        run, host = lost[0], lost[0].host
        of_rank = f" (rank {run.rank})" if job.nodes > 1 else ""
        job = job_recover(
            job=job,
            host=host,
            reason=f"host {host.name}{of_rank} was lost under run {run.number} "
            f"({host.get_status_display().lower()}: {host.status_reason or 'no reason given'})",
        )
        # One loss, one recovery: the run's other lost nodes are replaced within it.
        for other in lost[1:]:
            if job.status == Job.Status.RECOVERING and other.host.replaced_by is None:
                job = _replace(job, other.host)
        return "host_lost"
    if rule != "no_live_host":
        return None
    # Its newest dead host, locked as the spot recovery locks it to start its replacement: a
    # replacement reconcile started since the hosts were read (at once, as it recorded the
    # interruption) is in the hosts read again, and the job waits for it.
    Instance.objects.select_for_update().only("pk").get(pk=_newest_dead(hosts).pk)
    hosts = list(order.instances.all())
    if _dead_rank(hosts) is None:
        return None
    last = _newest_dead(hosts)
    if job.status == Job.Status.RECOVERING and last.replaced_by is None:
        # The recovery it waits in was counted when it began: this host is replaced within it.
        job_note(job=job, note=f"host {last.name} ended while the job waited", host=last)
        job = _replace(job, last)
        if job.status == Job.Status.RECOVERING:
            return "host_lost"
    taken_back = last.events.filter(new_status=Instance.Status.INTERRUPTED).exists()
    if taken_back and last.replaced_by is None:
        # Taken back before the job ran on it, and the spot recovery that replaces it did
        # not get to (a worker died between the two): the job waits for the replacement.
        replacement = replacement_start(instance_id=last.pk, why="interruption")
        if replacement is not None:
            job_note(job=job, note=f"waits for host {replacement.name}", host=replacement)
            return "host_lost"
    job_transition(
        job=job,
        to=Job.Status.FAILED,
        reason=f"no host could run it: {last.status_reason or last.get_status_display()}",
        actor=ACTOR,
        host=last,
    )
    return "no_host"
