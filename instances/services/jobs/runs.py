"""instances/services/jobs/runs.py: what a host's agent is told and tells (the agent is
instances/agent/portal_agent.py, mode ``jobs``): the run it is handed, that it started, its
output, its TensorBoard scalars, its exit; and what the exit means for the job (succeeded,
failed, or recovering as its policy says).

Every call is idempotent: an agent retries until it hears back, and a retried hand-out, start
or exit changes nothing the first one did not. A run is handed to one host at a time, under the
job's row lock, so a job never runs twice at once."""

from __future__ import annotations

import base64
import dataclasses
import math

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from instances.lib.checkpoints import backup_dir
from instances.lib.tensorboard import LOG_FOLDER
from instances.models import Instance, Job, JobLogChunk, JobRun, JobScalar, JobWorkdir
from instances.services.jobs.lifecycle import ACTOR, job_note, job_transition
from instances.services.jobs.recovery import job_recover
from portal.lib.errors import Conflict

LOG_CHUNK_MAX_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Assignment:
    """The run a host's agent is to run (or is running): what the API sends it."""

    job: Job
    run: JobRun
    stop: bool

    def as_dict(self) -> dict:
        job = self.job
        return {
            "job": str(job.pk),
            "run": self.run.number,
            "command": job.command,
            "env": run_environment(job, self.run),
            "stop_signal": job.stop_signal,
            "grace_seconds": job.grace_seconds,
            "stop": self.stop,
            "workdir": workdir_spec(job),
        }


def workdir_spec(job: Job) -> dict | None:
    """The job's working folder as the agent puts it in place (instances/agent/workdir.py):
    the uploaded archive (base64), or the git repository and ref; None without one."""
    if job.workdir_git:
        return {"git": job.workdir_git, "ref": job.workdir_ref}
    upload = JobWorkdir.objects.filter(job=job).first()
    return {"tarball": base64.b64encode(bytes(upload.data)).decode()} if upload else None


def run_environment(job: Job, run: JobRun) -> dict[str, str]:
    """The job's variables and the portal's: CHECKPOINT_DIR (in the order's checkpoint
    location, the same for every run), TENSORBOARD_LOG_DIR (beside it, not inside:
    BackupAndRestore deletes its folder when training ends), JOB_ID and JOB_RECOVERY (how many
    recoveries came before this run)."""
    uri = job.order.checkpoint_uri
    # On S3 the agent syncs a local folder to the location (TensorFlow renames files).
    base = "" if uri.startswith("s3://") else backup_dir(uri).rstrip("/")
    env = dict(job.env)
    env.update(
        {
            "CHECKPOINT_DIR": f"{base}/checkpoints/" if base else "checkpoints/",
            "TENSORBOARD_LOG_DIR": f"{base}/{LOG_FOLDER}/" if base else f"{LOG_FOLDER}/",
            "JOB_ID": str(job.pk),
            "JOB_RECOVERY": str(run.recovery),
        }
    )
    if uri:
        env["PORTAL_CHECKPOINT_URI"] = uri  # on S3 the agent syncs both folders to it
    return env


def _must_stop(job: Job, host: Instance) -> bool:
    """The agent stops the command (signal, grace, kill) when the job ended or the host is
    leaving: the cloud warned it takes it back, or it is being stopped or terminated."""
    return (
        job.is_ended
        or host.spot_interruption_at is not None
        or host.status != Instance.Status.RUNNING
    )


def job_of_host(host: Instance) -> Job | None:
    return Job.objects.filter(order_id=host.order_id).first()


def job_assignment(*, host: Instance) -> Assignment | None:
    """The run this host is to run now, or None. A job waiting for a host (pending, or
    recovering) is handed to the first running, unwarned host of its order that asks; a host
    asking again about its own live run gets the same run back (an agent that restarted)."""
    job = job_of_host(host)
    if job is None:
        return None
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("order").get(pk=job.pk)
        host = Instance.objects.get(pk=host.pk)  # as it is now, under the job's lock
        current = job.runs.order_by("-number").first()
        if current is not None and current.host_id == host.pk and current.ended_at is None:
            return Assignment(job, current, _must_stop(job, host))
        if job.status not in (Job.Status.PENDING, Job.Status.RECOVERING) or _must_stop(job, host):
            return None
        now = timezone.now()
        number = (current.number if current else 0) + 1
        run = JobRun.objects.create(
            job=job, number=number, host=host, recovery=job.recoveries, handed_at=now
        )
        header = (
            f"=== run {number} on host {host.name} ({host.get_market_display().lower()}, "
            f"recovery {job.recoveries}) at {now:%Y-%m-%d %H:%M:%S} UTC ===\n"
        )
        _log_append(job, (("\n" if job.log_bytes else "") + header).encode())
        job, _ = job_transition(
            job=job,
            to=Job.Status.STARTING,
            reason=f"run {number} handed to host {host.name}",
            actor=ACTOR,
            host=host,
            started_at=job.started_at or now,
        )
    return Assignment(job, run, False)


def _current_run(host: Instance, job_id, number: int) -> tuple[Job, JobRun]:
    """The job (locked) and its run ``number`` on this host; 409 if the run is not this
    host's (another host has the job now: this run is not wanted)."""
    job = (
        Job.objects.select_for_update()
        .select_related("order", "owner", "project")
        .filter(pk=job_id, order_id=host.order_id)
        .first()
    )
    run = job and job.runs.filter(number=number, host=host).first()
    if run is None:
        raise Conflict("This run is not this host's to run.", code="not_this_run")
    # The host as it is now (a warning may have come since the caller read it).
    run.host = Instance.objects.get(pk=host.pk)
    return job, run


def job_run_started(*, host: Instance, job_id, number: int, pid: int) -> bool:
    """The agent started the command: the job runs. Returns whether it must stop already."""
    with transaction.atomic():
        job, run = _current_run(host, job_id, number)
        host = run.host
        if run.ended_at is not None:
            raise Conflict("This run has already ended.", code="not_this_run")
        if run.started_at is None:
            JobRun.objects.filter(pk=run.pk).update(started_at=timezone.now(), pid=pid)
        if job.status == Job.Status.STARTING and job.host_id == host.pk:
            job, _ = job_transition(
                job=job,
                to=Job.Status.RUNNING,
                reason=f"run {number} started on host {host.name}",
                actor=ACTOR,
                host=host,
            )
        return _must_stop(job, host)


def _log_append(job: Job, data: bytes) -> int:
    """Append to the job's log up to its cap; returns the bytes stored."""
    room = settings.PORTAL_JOB_LOG_CAP_BYTES - job.log_bytes
    kept = data[: max(room, 0)]
    if kept:
        JobLogChunk.objects.create(job=job, start=job.log_bytes, data=kept)
    capped = len(kept) < len(data)
    Job.objects.filter(pk=job.pk).update(
        log_bytes=F("log_bytes") + len(kept), log_capped=job.log_capped or capped
    )
    job.log_bytes += len(kept)
    job.log_capped = job.log_capped or capped
    return len(kept)


def job_log_append(*, host: Instance, job_id, number: int, offset: int, data: bytes) -> dict:
    """Bytes ``offset`` on of a run's output. The portal keeps what it has not seen (a resent
    stretch is cut to its new part) and answers how far it has the run's output, so the agent
    resends from there after any failure; past the cap it says ``capped`` and keeps no more."""
    if len(data) > LOG_CHUNK_MAX_BYTES:
        raise Conflict(
            f"A log chunk is at most {LOG_CHUNK_MAX_BYTES // 1024} KiB.", code="chunk_too_large"
        )
    with transaction.atomic():
        job, run = _current_run(host, job_id, number)
        host = run.host
        received = run.log_received
        if offset <= received < offset + len(data):
            new = data[received - offset :]
            if not job.log_capped:
                _log_append(job, new)
            received += len(new)
            JobRun.objects.filter(pk=run.pk).update(log_received=received)
        return {"offset": received, "stop": _must_stop(job, host), "capped": job.log_capped}


def job_run_exited(
    *,
    host: Instance,
    job_id,
    number: int,
    exit_code: int | None,
    signal: str = "",
    stopped: bool = False,
    interrupted: bool = False,
) -> Job:
    """The run's command ended. What that means: a job that ended meanwhile (cancelled, out
    of time) only records it; a run stopped because its host is leaving is an interruption
    (the job recovers on another host); exit 0 succeeds; an exit code the job retries, or a
    failure within its restarts, runs it again; anything else fails the job."""
    now = timezone.now()
    with transaction.atomic():
        job, run = _current_run(host, job_id, number)
        host = run.host
        if run.ended_at is not None:
            return job
        leaving = interrupted or host.spot_interruption_at is not None
        said = f"exit code {exit_code}" if exit_code is not None else f"signal {signal or '?'}"
        if job.is_ended or (stopped and not leaving):
            outcome, next_step = JobRun.Outcome.STOPPED, None
        elif leaving:
            outcome, next_step = JobRun.Outcome.INTERRUPTED, "recover"
        elif exit_code == 0:
            outcome, next_step = JobRun.Outcome.SUCCEEDED, "succeed"
        else:
            outcome, next_step = JobRun.Outcome.FAILED, "fail"
        JobRun.objects.filter(pk=run.pk).update(
            ended_at=now, exit_code=exit_code, signal=signal[:16], outcome=outcome
        )
        if next_step == "succeed":
            job, _ = job_transition(
                job=job,
                to=Job.Status.SUCCEEDED,
                reason=f"run {number} exited 0 on host {host.name}",
                actor=ACTOR,
                host=host,
                exit_code=0,
            )
        elif next_step == "recover":
            job = job_recover(
                job=job,
                host=host,
                reason=f"the cloud is taking back spot host {host.name}; run {number} was "
                f"stopped to save its checkpoint ({said})",
                interruption=True,
            )
        elif next_step == "fail":
            job = _failed(job, host, number, exit_code, said)
    return job


def _failed(job: Job, host: Instance, number: int, exit_code: int | None, said: str) -> Job:
    """A run's own failure: retried when its code is one the job retries or restarts are
    left, else the job fails (keeping its last host when its policy says)."""
    if exit_code is not None and exit_code in job.retry_exit_codes:
        job_note(job=job, note=f"run {number} ended with {said}, a code the job retries", host=host)
        return job_recover(
            job=job, host=host, reason=f"run {number} ended with {said} (retried)", restart=True
        )
    if job.restarts < job.max_restarts:
        return job_recover(
            job=job,
            host=host,
            reason=f"run {number} failed with {said}; restart {job.restarts + 1} of "
            f"{job.max_restarts}",
            restart=True,
            counts=True,
        )
    job, _ = job_transition(
        job=job,
        to=Job.Status.FAILED,
        reason=f"run {number} failed with {said} on host {host.name}",
        actor=ACTOR,
        host=host,
        exit_code=exit_code,
    )
    return job


# What a job may keep of its TensorBoard scalars: tags, and points in all.
SCALAR_TAGS_MAX = 64
SCALAR_POINTS_MAX = 50_000


def job_scalars_record(*, host: Instance, job_id, number: int, points: list[dict]) -> dict:
    """Scalars the run wrote to TensorBoard, as the agent read them: each (tag, step) kept once,
    a resumed run's point replacing the one before. Past the job's tags or points the rest is
    not kept (``capped``); values that are not finite are not drawn and not kept."""
    with transaction.atomic():
        job, _ = _current_run(host, job_id, number)
        held = JobScalar.objects.filter(job=job)
        tags = set(held.values_list("tag", flat=True).distinct())
        room = SCALAR_POINTS_MAX - held.count()
        rows, capped = {}, False
        for point in points:
            if not math.isfinite(point["value"]):
                continue
            if point["tag"] not in tags and len(tags) >= SCALAR_TAGS_MAX:
                capped = True
                continue
            tags.add(point["tag"])
            rows[(point["tag"], point["step"])] = JobScalar(job=job, **point)
        rows = list(rows.values())
        if len(rows) > room:
            rows, capped = rows[: max(room, 0)], True
        JobScalar.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["job", "tag", "step"],
            update_fields=["value", "wall_time"],
        )
    return {"stored": len(rows), "capped": capped}
