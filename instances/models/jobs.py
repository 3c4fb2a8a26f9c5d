"""instances/models/jobs.py: managed jobs. A job is a command the portal runs for a researcher on
a host of its own order: its state machine (statuses and the legal moves), its recovery policy,
its runs (one per start of the command, on whichever host), its event timeline and its log.

Only job_transition() (instances/services/jobs/lifecycle.py) writes ``status``."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from instances.models.hosts import Instance
from instances.models.orders import Order, ProjectScopedQuerySet


class JobMarket(models.TextChoices):
    """Where a job's hosts come from: the order's market and its interruption policy."""

    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"
    SPOT_THEN_ON_DEMAND = "spot_then_on_demand", "Spot, then on-demand"


class Job(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        STARTING = "starting", "Starting"
        RUNNING = "running", "Running"
        RECOVERING = "recovering", "Recovering"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    # pending: its host is on the way (approval, capacity, boot); starting: a host's agent was
    # handed the run; recovering: the run ended by an interruption, a lost host or a retried
    # failure, and the next run waits for a host.
    ALLOWED: dict[str, frozenset[str]] = {
        Status.PENDING: frozenset({Status.STARTING, Status.FAILED, Status.CANCELLED}),
        Status.STARTING: frozenset(
            {Status.RUNNING, Status.RECOVERING, Status.FAILED, Status.CANCELLED}
        ),
        Status.RUNNING: frozenset(
            {Status.SUCCEEDED, Status.FAILED, Status.RECOVERING, Status.CANCELLED}
        ),
        Status.RECOVERING: frozenset({Status.STARTING, Status.FAILED, Status.CANCELLED}),
        Status.SUCCEEDED: frozenset(),
        Status.FAILED: frozenset(),
        Status.CANCELLED: frozenset(),
    }
    ENDED = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
    # A pending job's status_reason once its order is placed (at once, or when approved).
    WAITING_FOR_HOST = "waiting for its host to launch"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey("portal.User", on_delete=models.PROTECT, related_name="jobs")
    # The job's own order (one host at a time, or one cluster of nodes): admission, approval,
    # its hosts and their replacements are the order's, exactly as for hosts ordered by hand.
    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="job")
    name = models.CharField(max_length=100)
    command = models.TextField()
    env = models.JSONField(default=dict, blank=True)
    market = models.CharField(max_length=24, choices=JobMarket.choices)
    # The recovery policy: None recoveries is "as many as the time limit allows".
    max_recoveries = models.PositiveIntegerField(null=True, blank=True)
    max_restarts = models.PositiveIntegerField(default=0)
    retry_exit_codes = models.JSONField(default=list, blank=True)
    time_limit_minutes = models.PositiveIntegerField()
    stop_signal = models.CharField(max_length=16, default="SIGTERM")
    grace_seconds = models.PositiveIntegerField(default=30)
    keep_host_minutes = models.PositiveIntegerField(
        default=0, help_text="How long a failed job's last host is kept for its owner to look"
    )
    # The working folder the command starts in (beside its checkpoints): the files of a
    # tarball uploaded with the job (JobWorkdir), or of a git repository the agent clones.
    workdir_git = models.CharField(max_length=2000, blank=True)
    workdir_ref = models.CharField(max_length=200, blank=True)
    # A re-run copies the settings of the job it re-runs.
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True
    )
    status_reason = models.CharField(max_length=500, blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    recoveries = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    # The host the current (or last) run is on (a cluster job's: its rank 0 node's).
    host = models.ForeignKey(
        Instance, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # The host kept after a failure is terminated at this time.
    keep_host_until = models.DateTimeField(null=True, blank=True)
    # The log as stored: its length in bytes, and whether the cap stopped it.
    log_bytes = models.PositiveBigIntegerField(default=0)
    log_capped = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [models.Index(fields=["project", "status"])]

    def __str__(self) -> str:
        return f"job {self.name} {self.id} ({self.status})"

    @property
    def is_ended(self) -> bool:
        return self.status in self.ENDED

    @property
    def nodes(self) -> int:
        """How many hosts each run takes: a cluster job's order's nodes, else one."""
        return self.order.count if self.order.is_cluster else 1


class JobRunQuerySet(models.QuerySet):
    def end_with_host(self, host: Instance, at) -> int:
        """A host that ended takes its open runs with it (its agent can report no exit now):
        a run of a job that has ended was stopped with it, any other run's host was lost
        (the job pass then recovers the job). Returns how many runs ended."""
        still_open = self.filter(host=host, ended_at__isnull=True)
        stopped = still_open.filter(job__status__in=Job.ENDED).update(
            ended_at=at, outcome=JobRun.Outcome.STOPPED
        )
        return stopped + still_open.update(ended_at=at, outcome=JobRun.Outcome.LOST)


class JobRun(models.Model):
    """One start of the job's command on one host, from hand-out to exit. A cluster job's
    run ``number`` starts the command on every node at once: one row per rank, all with that
    number (a job of one host has rank 0 only)."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        INTERRUPTED = "interrupted", "Interrupted"
        LOST = "lost", "Host lost"
        STOPPED = "stopped", "Stopped"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField()
    rank = models.PositiveSmallIntegerField(default=0)
    host = models.ForeignKey(Instance, on_delete=models.PROTECT, related_name="job_runs")
    recovery = models.PositiveIntegerField(help_text="JOB_RECOVERY: recoveries before this run")
    handed_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.CharField(max_length=16, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    # Bytes of this run's output the portal holds (the agent resumes from here).
    log_received = models.PositiveBigIntegerField(default=0)
    # A cluster run's output goes into the job's log line by line, each line behind its rank:
    # where the job's log ended when this run's last bytes left a line open there (its next
    # bytes go on that line if nothing was written since), else null.
    log_open_at = models.PositiveBigIntegerField(null=True, blank=True)

    objects = JobRunQuerySet.as_manager()

    class Meta:
        ordering = ["job", "number", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "number", "rank"], name="job_run_unique_number_rank"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.number} (rank {self.rank}) of {self.job_id} on {self.host_id}"


class JobEvent(models.Model):
    """One move of a job (or a note that changed no status), with why, when and who."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    old_status = models.CharField(max_length=16, blank=True)
    new_status = models.CharField(max_length=16)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150)
    host = models.ForeignKey(
        Instance, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.old_status or '∅'} → {self.new_status}"


class JobLogChunk(models.Model):
    """A stretch of a job's log: bytes ``start`` to ``start + len(data)`` of the whole log
    (every run's output, one after the other, each opened by a line the portal writes).
    Appended, never rewritten; a page reads the tail by ``start``."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_chunks")
    start = models.PositiveBigIntegerField()
    data = models.BinaryField()

    class Meta:
        ordering = ["job", "start"]
        constraints = [
            models.UniqueConstraint(fields=["job", "start"], name="job_log_chunk_unique_start")
        ]

    def __str__(self) -> str:
        return f"log of {self.job_id} from byte {self.start}"


class JobScalar(models.Model):
    """One point of a scalar the job wrote to TensorBoard (its tag, e.g. "train/epoch_loss",
    at a step), as the host's agent read it from the event files. A run that resumes and
    writes a step again replaces it: the chart shows the run that counted."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="scalars")
    tag = models.CharField(max_length=128)
    step = models.BigIntegerField()
    value = models.FloatField()
    wall_time = models.FloatField(help_text="When the job wrote it (seconds since the epoch)")

    class Meta:
        ordering = ["job", "tag", "step"]
        constraints = [
            models.UniqueConstraint(fields=["job", "tag", "step"], name="job_scalar_unique_step")
        ]

    def __str__(self) -> str:
        return f"{self.tag}@{self.step}={self.value} of {self.job_id}"


class JobWorkdir(models.Model):
    """A job's uploaded working folder, a tar archive (gzipped or not) its hosts' agents fetch
    and unpack before the first run on each host; kept apart so that reading jobs never loads
    it."""

    job = models.OneToOneField(
        Job, primary_key=True, on_delete=models.CASCADE, related_name="workdir"
    )
    data = models.BinaryField()
    size = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"working folder of {self.job_id} ({self.size} bytes)"
