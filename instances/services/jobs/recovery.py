"""instances/services/jobs/recovery.py: a job outlives its hosts. When a run ends by an
interruption or a lost host, the job moves to ``recovering`` and its next run waits for the
replacement host that the spot recovery (instances/services/spot_recovery.py) launches for its
order: another zone first, on-demand where the job's market says so. A run's own failure the
job retries restarts on the same host. The job pass (jobs_pass) repairs what no agent reported:
hosts lost under a run, orders that were refused, time limits, kept hosts whose time is up."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from instances.models import Instance, InterruptionPolicy, Job, JobMarket, JobRun, Order
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
    replacement = replacement_start(
        instance_id=host.pk,
        why="interruption warning" if interruption else "job recovery",
        # An on-demand job's order has no interruption policy; its job's is "on-demand again".
        policy=InterruptionPolicy.FALLBACK_ON_DEMAND if job.market == JobMarket.ON_DEMAND else None,
    )
    if replacement is None:
        job, _ = job_transition(
            job=job,
            to=Job.Status.FAILED,
            reason=f"no replacement host for the recovery: {_refusal(host)}",
            actor=ACTOR,
            host=host,
        )
    else:
        job_note(job=job, note=f"recovers on host {replacement.name}", host=replacement)
    return job


def _refusal(host: Instance) -> str:
    """Why the spot recovery launched no replacement (its latest note on the host)."""
    note = host.events.filter(reason__startswith=REFUSED).order_by("-at", "-id").first()
    return note.reason.removeprefix(REFUSED) if note else "the order's policy launches none."


def jobs_pass(*, now=None) -> dict[str, int]:
    """Repair what no agent said: returns how many jobs each rule moved. The live jobs are
    screened in two queries whatever their number (_rule on what they read); only those a rule
    holds for are locked, read again and repaired."""
    now = now or timezone.now()
    moved = {"order_ended": 0, "host_lost": 0, "no_host": 0, "time_limit": 0, "released": 0}
    live = list(
        Job.objects.filter(status__in=LIVE_JOB)
        .select_related("order", "host")
        .only("status", "started_at", "time_limit_minutes", "order__status", "host__status")
    )
    waiting = [job.order_id for job in live if job.status not in RUNS]
    statuses: dict = defaultdict(list)
    for order_id, status in Instance.objects.filter(order_id__in=waiting).values_list(
        "order_id", "status"
    ):
        statuses[order_id].append(status)
    for screened in live:
        if _rule(screened, now, statuses[screened.order_id]) is None:
            continue
        with transaction.atomic():
            job = (
                Job.objects.select_for_update(of=("self",))
                .select_related("order", "host")
                .get(pk=screened.pk)
            )
            if job.is_ended:
                continue
            hosts = list(job.order.instances.all())
            rule = _repair(job, now, _rule(job, now, [host.status for host in hosts]), hosts)
            if rule:
                moved[rule] += 1
    for job in Job.objects.filter(status=Job.Status.FAILED, keep_host_until__lte=now):
        job_host_release(job)
        moved["released"] += 1
    return moved


def _rule(job: Job, now, host_statuses: list[str]) -> str | None:
    """Which repair the job needs now, if any, from the job, its order, its host and the
    statuses of its order's hosts (read only)."""
    order = job.order
    if job.status == Job.Status.PENDING and order.status in ORDER_ENDED:
        return "order_ended"
    if job.started_at and now >= job.started_at + timedelta(minutes=job.time_limit_minutes):
        return "time_limit"
    if job.status in RUNS:
        # Its run was handed to a running host: one that is no longer running (taken back,
        # stopped, ended) took the run with it.
        host = job.host
        return "host_lost" if host is not None and host.status != Instance.Status.RUNNING else None
    if order.status != Order.Status.PLACED:
        return None
    if host_statuses and not any(status in Instance.LIVE for status in host_statuses):
        return "no_live_host"  # every host of the order ended before the job could run on one
    return None


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
        host = job.host
        # (A host that ended closed the run as it did: JobRunQuerySet.end_with_host.)
        run = job.runs.filter(host=host).order_by("-number").first()
        if run is not None and run.ended_at is None:
            JobRun.objects.filter(pk=run.pk).update(ended_at=now, outcome=JobRun.Outcome.LOST)
        job_recover(
            job=job,
            host=host,
            reason=f"host {host.name} was lost under run {run.number if run else '?'} "
            f"({host.get_status_display().lower()}: {host.status_reason or 'no reason given'})",
        )
        return "host_lost"
    if rule != "no_live_host":
        return None
    last = max(hosts, key=lambda h: (h.created_at, str(h.pk)))
    if job.status == Job.Status.RECOVERING and last.replaced_by is None:
        job = job_recover(job=job, host=last, reason=f"host {last.name} ended")
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
