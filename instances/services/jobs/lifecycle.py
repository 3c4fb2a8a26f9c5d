"""instances/services/jobs/lifecycle.py: the job state machine (the only writer of Job.status),
what each move does to the job's hosts, and what its owner is told.

A job's hosts are its order's: the order's admission, approval and spot recovery launch them,
and a job ends them when it ends (a failed job may keep its last host for a while, as its
policy says, so its owner can look)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from instances.models import Instance, Job, JobEvent
from instances.services.hosts import instances_end
from instances.services.transitions import IllegalTransition, audit_change
from instances.services.webhooks import job_moved
from portal.services import notice_send, notices_close

ACTOR = "system:jobs"
# The moves the owner hears of (a notice and an email), with the reason.
TOLD = frozenset({Job.Status.SUCCEEDED, Job.Status.FAILED, Job.Status.RECOVERING})


def job_transition(
    *,
    job: Job | str,
    to: str,
    reason: str,
    actor: str,
    host: Instance | None = None,
    tell: bool = True,
    **fields,
) -> tuple[Job, bool]:
    """Move a job (locked) to ``to``, refusing illegal moves, treating a repeat as a no-op,
    recording the move with its reason; ``fields`` are written with it. ``host``: the host the
    move is about (a run handed to it makes it the job's host). A job that ends ends its hosts;
    the owner hears of successes, failures and (``tell``) recoveries: a restart on the same
    host is on the job's timeline only."""
    pk = job.pk if isinstance(job, Job) else job
    if to == Job.Status.STARTING and host is not None:
        fields["host"] = host
    now = timezone.now()
    with transaction.atomic():
        row = Job.objects.select_for_update().select_related("owner", "project").get(pk=pk)
        if row.status == to:
            return row, False
        if to not in Job.ALLOWED[row.status]:
            raise IllegalTransition(
                f"This job is {row.get_status_display().lower()}; it cannot become "
                f"{Job.Status(to).label.lower()}."
            )
        old, row.status = row.status, to
        row.status_reason = reason[:500]
        row.status_changed_at = now
        changed = ["status", "status_reason", "status_changed_at", *fields]
        for name, value in fields.items():
            setattr(row, name, value)
        if to in Job.ENDED:
            row.ended_at = now
            changed.append("ended_at")
        row.save(update_fields=changed)
        JobEvent.objects.create(
            job=row,
            old_status=old,
            new_status=to,
            reason=reason[:500],
            at=now,
            actor=actor,
            host=host or row.host,
        )
        audit_change(actor, action=f"{old}->{to}", object_ref=f"job:{row.pk}", reason=reason)
        if to in Job.ENDED:
            _end_hosts(row, reason=f"job {row.name} {to}")
        if to in (Job.Status.RUNNING, *Job.ENDED):
            notices_close(topic=f"job:{row.pk}:recovering", reason=f"The job is {to}.")
        if to in TOLD and tell:
            _tell(row, to, reason)
        job_moved(row, to)
    return row, True


def job_note(*, job: Job, note: str, actor: str = ACTOR, host: Instance | None = None) -> None:
    """Record what changed no status (a run handed out, a replacement) on the timeline."""
    JobEvent.objects.create(
        job=job,
        old_status=job.status,
        new_status=job.status,
        reason=note[:500],
        actor=actor,
        host=host,
    )


def _end_hosts(job: Job, *, reason: str) -> None:
    """A job that ended ends its hosts, except a failed job's last host (a cluster job's last
    run's nodes) while its policy keeps it (the job pass ends them at ``keep_host_until``)."""
    hosts = list(
        Instance.objects.filter(order_id=job.order_id, status__in=Instance.LIVE).exclude(
            status=Instance.Status.TERMINATING
        )
    )
    if job.status == Job.Status.FAILED and job.keep_host_minutes and job.host_id:
        last = job.runs.order_by("-number").values_list("number", flat=True).first()
        ran = set(job.runs.filter(number=last).values_list("host_id", flat=True)) or {job.host_id}
        kept = [host for host in hosts if host.pk in ran]
        if kept:
            until = timezone.now() + timedelta(minutes=job.keep_host_minutes)
            Job.objects.filter(pk=job.pk).update(keep_host_until=until)
            job.keep_host_until = until
            names = ", ".join(host.name for host in kept)
            job_note(
                job=job,
                note=f"its last host{'s' if len(kept) > 1 else ''} {names} "
                f"{'are' if len(kept) > 1 else 'is'} kept until {until:%Y-%m-%d %H:%M} UTC for "
                "you to look (keep host on failure)",
                host=kept[0],
            )
            hosts = [host for host in hosts if host.pk not in ran]
    instances_end(hosts, reason=reason, actor=ACTOR)


def job_host_release(job: Job) -> None:
    """The kept hosts of a failed job, once their time is up (or its owner lets them go): the
    order's live hosts, the kept ones being all it has left."""
    hosts = list(Instance.objects.filter(order_id=job.order_id, status__in=Instance.LIVE))
    if hosts:
        instances_end(hosts, reason=f"job {job.name} failed; its kept time ended", actor=ACTOR)
    Job.objects.filter(pk=job.pk).update(keep_host_until=None)


def _tell(job: Job, to: str, reason: str) -> None:
    subject = {
        Job.Status.SUCCEEDED: f"Job {job.name} succeeded",
        Job.Status.FAILED: f"Job {job.name} failed",
        Job.Status.RECOVERING: f"Job {job.name} is recovering",
    }[to]
    body = reason.rstrip(".") + "."
    if to == Job.Status.RECOVERING and job.order.is_cluster:
        body += (
            f" It restarts from its checkpoint on all {job.order.count} nodes once the cluster "
            "is whole again (only a lost node is replaced, with its rank)."
        )
    elif to == Job.Status.RECOVERING:
        body += " It restarts on another host with the same CHECKPOINT_DIR."
    notice_send(
        user=job.owner,
        subject=subject,
        body=body,
        link=f"/jobs/{job.pk}/",
        topic=f"job:{job.pk}:{to}",
    )
