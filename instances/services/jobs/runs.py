"""instances/services/jobs/runs.py: what a host's agent is told and tells (the agent is
instances/agent/portal_agent.py, mode ``jobs``): the run it is handed, that it started, its
output, its TensorBoard scalars, its exit; and what the exit means for the job (succeeded,
failed, or recovering as its policy says).

Every call is idempotent: an agent retries until it hears back, and a retried hand-out, start
or exit changes nothing the first one did not. A run is handed out under the job's row lock,
and only once the run before it has ended everywhere, so a job never runs twice at once.

A cluster job's run is a gang: it is handed to every node at once (one JobRun per rank, the
same number), only while the cluster is whole (each rank's node running, none warned), and
each node's command gets TF_CONFIG with the others' addresses. It runs once every rank
started, succeeds once every rank exited 0, and one rank's failure or interruption ends the
run on every node (the others are told to stop); the next run starts on all nodes from the
checkpoint once the cluster is whole again, with only the lost node replaced."""

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
from instances.models import Instance, Job, JobLogChunk, JobRun, JobScalar
from instances.selectors.clusters import cluster_members, run_cluster_environment
from instances.selectors.jobs import job_archive
from instances.services.jobs.lifecycle import ACTOR, job_note, job_transition
from instances.services.jobs.recovery import RUNS, job_recover
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
            "rank": self.run.rank,
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
    archive = job_archive(job)
    return {"tarball": base64.b64encode(archive).decode()} if archive is not None else None


def run_environment(job: Job, run: JobRun) -> dict[str, str]:
    """The job's variables and the portal's: CHECKPOINT_DIR (in the order's checkpoint
    location, the same for every run), TENSORBOARD_LOG_DIR (beside it, not inside:
    BackupAndRestore deletes its folder when training ends), JOB_ID and JOB_RECOVERY (how many
    recoveries came before this run); on a cluster job's nodes, TF_CONFIG, the rank and size
    and the network variables (selectors/clusters.py)."""
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
    if job.order.is_cluster:
        gang = job.runs.filter(number=run.number).select_related("host__order__instance_type")
        env.update(run_cluster_environment(run.rank, [node.host for node in gang]))
    slot = run.host.held_slot if job.order.is_mig_slice else None
    if slot is not None:
        # A slice's run sees its own MIG device only, whatever the job's env says.
        env["CUDA_VISIBLE_DEVICES"] = slot.device_uuid
    return env


def _leaving(host: Instance) -> bool:
    """The cloud warned it takes the host back, or it is being stopped or terminated."""
    return host.spot_interruption_at is not None or host.status != Instance.Status.RUNNING


def _must_stop(job: Job, host: Instance, number: int | None = None) -> bool:
    """The agent stops the command (signal, grace, kill) when its run is over for the job (the
    job ended, or is recovering: another node of its cluster lost or failed the run) or its
    host is leaving; on a cluster, as soon as any node of run ``number`` is leaving."""
    if job.status not in RUNS or _leaving(host):
        return True
    return number is not None and job.nodes > 1 and _gang_leaving(job, number) is not None


def _gang_leaving(job: Job, number: int) -> JobRun | None:
    """The first rank's run of run ``number`` whose node is leaving (warned, or no longer
    running) or that ended interrupted or lost; None while every node is sound."""
    gang = job.runs.filter(number=number).select_related("host").order_by("rank")
    for run in gang:
        if _leaving(run.host) or run.outcome in (JobRun.Outcome.INTERRUPTED, JobRun.Outcome.LOST):
            return run
    return None


def _leaving_how(host: Instance) -> str:
    if host.spot_interruption_at is not None:
        return "being taken back by the cloud"
    return host.get_status_display().lower()


def _gang(job: Job, host: Instance) -> list[Instance] | None:
    """The hosts a new run of the job goes to, in rank order, when ``host`` may start it: the
    host itself, or every node of a cluster job while the cluster is whole (each rank's node
    running and unwarned, ``host`` among them). None: not now."""
    if not job.order.is_cluster:
        return [host]
    nodes = cluster_members([job.order_id]).get(job.order_id, [])
    if len(nodes) != job.order.count or any(_leaving(node) for node in nodes):
        return None
    return nodes if host.pk in {node.pk for node in nodes} else None


def job_of_host(host: Instance) -> Job | None:
    return Job.objects.filter(order_id=host.order_id).first()


def job_assignment(*, host: Instance) -> Assignment | None:
    """The run this host is to run now, or None. A job waiting for a host (pending, or
    recovering) is handed to the first running, unwarned host of its order that asks (a
    cluster job's, to every node at once, see _gang), once its last run has ended on every
    host; a host asking again about its own open run gets the same run back (an agent that
    restarted)."""
    job = job_of_host(host)
    if job is None:
        return None
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("order").get(pk=job.pk)
        host = Instance.objects.get(pk=host.pk)  # as it is now, under the job's lock
        current = job.runs.filter(host=host, ended_at__isnull=True).order_by("-number").first()
        if current is not None:
            return Assignment(job, current, _must_stop(job, host, current.number))
        if job.status not in (Job.Status.PENDING, Job.Status.RECOVERING) or _leaving(host):
            return None
        if job.runs.filter(ended_at__isnull=True).exists():
            return None  # the last run is still stopping on another node
        hosts = _gang(job, host)
        if hosts is None:
            return None
        now = timezone.now()
        number = (job.runs.order_by("-number").values_list("number", flat=True).first() or 0) + 1
        runs = JobRun.objects.bulk_create(
            JobRun(
                job=job, number=number, rank=rank, host=node, recovery=job.recoveries, handed_at=now
            )
            for rank, node in enumerate(hosts)
        )
        where = f"host {host.name}"
        if len(hosts) > 1:
            names = ", ".join(f"{node.name} (rank {rank})" for rank, node in enumerate(hosts))
            where = f"{len(hosts)} nodes: {names}"
        header = (
            f"=== run {number} on {where} ({host.get_market_display().lower()}, recovery "
            f"{job.recoveries}) at {now:%Y-%m-%d %H:%M:%S} UTC ===\n"
        )
        _log_append(job, (("\n" if job.log_bytes else "") + header).encode())
        job, _ = job_transition(
            job=job,
            to=Job.Status.STARTING,
            reason=f"run {number} handed to host {host.name}"
            if len(hosts) == 1
            else f"run {number} handed to all {len(hosts)} nodes",
            actor=ACTOR,
            host=hosts[0],
            started_at=job.started_at or now,
        )
    return Assignment(job, next(run for run in runs if run.host_id == host.pk), False)


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
        gang = job.runs.filter(number=number)
        if (
            job.status == Job.Status.STARTING
            and not job.runs.filter(number__gt=number).exists()
            and not gang.filter(started_at__isnull=True).exists()
        ):
            nodes = gang.count()
            job, _ = job_transition(
                job=job,
                to=Job.Status.RUNNING,
                reason=f"run {number} started on host {host.name}"
                if nodes == 1
                else f"run {number} started on all {nodes} nodes",
                actor=ACTOR,
                host=host if nodes == 1 else job.host,
            )
        return _must_stop(job, host, number)


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


def _behind_rank(job: Job, run: JobRun, data: bytes) -> bytes:
    """A cluster run's output as the job's log keeps it: every line behind "[rank N] ", so
    that the nodes' lines, arriving at once, stay apart and say whose they are. A line this
    run left open goes on where nothing came since; a line another node left open is closed
    first. Records where this run leaves a line open."""
    ours = run.log_open_at is not None and run.log_open_at == job.log_bytes
    theirs = (
        not ours
        and job.log_bytes > 0
        and job.runs.filter(log_open_at=job.log_bytes).exclude(pk=run.pk).exists()
    )
    prefix = f"[rank {run.rank}] ".encode()
    # A line's end is "\n", "\r\n" or "\r" (a progress bar redrawing itself); an end alone (the
    # "\n" of a "\r\n" cut across two chunks, an empty line) takes no prefix.
    kept = (b"\n" if theirs else b"") + b"".join(
        line if (index == 0 and ours) or not line.strip(b"\r\n") else prefix + line
        for index, line in enumerate(data.splitlines(keepends=True))
    )
    ended = data.endswith((b"\n", b"\r"))
    run.log_open_at = None if ended else job.log_bytes + len(kept)
    return kept


def job_log_append(*, host: Instance, job_id, number: int, offset: int, data: bytes) -> dict:
    """Bytes ``offset`` on of a run's output. The portal keeps what it has not seen (a resent
    stretch is cut to its new part) and answers how far it has the run's output, so the agent
    resends from there after any failure; past the cap it says ``capped`` and keeps no more.
    A cluster run's lines go in behind their rank (_behind_rank)."""
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
                _log_append(job, _behind_rank(job, run, new) if job.nodes > 1 else new)
            received += len(new)
            JobRun.objects.filter(pk=run.pk).update(
                log_received=received, log_open_at=run.log_open_at
            )
        return {
            "offset": received,
            "stop": _must_stop(job, host, number),
            "capped": job.log_capped,
        }


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
    failure within its restarts, runs it again; anything else fails the job.

    On a cluster, the run succeeds once its last rank exits 0; the first rank that fails or is
    interrupted decides for the run (its other ranks are then told to stop, and their exits
    only record it)."""
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
        gang = job.runs.filter(number=number).exclude(pk=run.pk)
        if job.status not in RUNS or job.runs.filter(number__gt=number).exists():
            next_step = None  # another rank already ended this run for the job
        elif next_step == "succeed" and gang.exclude(outcome=JobRun.Outcome.SUCCEEDED).exists():
            next_step = None
            job_note(job=job, note=f"run {number}: rank {run.rank} exited 0", host=host)
        elif next_step == "fail" and job.nodes > 1 and (peer := _gang_leaving(job, number)):
            # Its peer's node is leaving: the failure is the loss's (a worker whose peer went
            # away fails), and the job recovers as from the loss, not spending a restart.
            job = job_recover(
                job=job,
                host=peer.host,
                reason=f"host {peer.host.name} (rank {peer.rank}) is "
                f"{_leaving_how(peer.host)}; run {number} was stopped on every node (rank "
                f"{run.rank} ended with {said})",
                interruption=peer.host.spot_interruption_at is not None,
            )
            next_step = None
        on = f"host {host.name}" if job.nodes == 1 else f"host {host.name} (rank {run.rank})"
        if next_step == "succeed":
            job, _ = job_transition(
                job=job,
                to=Job.Status.SUCCEEDED,
                reason=f"run {number} exited 0 on {on}"
                if job.nodes == 1
                else f"run {number} exited 0 on all {job.nodes} nodes",
                actor=ACTOR,
                host=host,
                exit_code=0,
            )
        elif next_step == "recover":
            stopped_on = "" if job.nodes == 1 else " on every node"
            job = job_recover(
                job=job,
                host=host,
                reason=f"the cloud is taking back spot host {on}; run {number} was "
                f"stopped{stopped_on} to save its checkpoint ({said})",
                interruption=True,
            )
        elif next_step == "fail":
            job = _failed(
                job,
                host,
                number,
                exit_code,
                said if job.nodes == 1 else f"{said} on rank {run.rank}",
            )
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
        job, run = _current_run(host, job_id, number)
        if run.rank != 0:
            # A cluster's chief (rank 0) writes the training's summaries; the other workers'
            # copies would only repeat them.
            return {"stored": 0, "capped": False}
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
