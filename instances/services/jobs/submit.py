"""instances/services/jobs/submit.py: submit a job (checked field by field, then admitted as an
order of one host is: quota, budget, approval policy), cancel it, re-run it.

JOB_BOUNDS is the one table of a job's ranges: the checks here read it, the API states it."""

from __future__ import annotations

import hashlib
import io
import math
import re
import tarfile

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from instances.models import (
    Image,
    InstanceType,
    InterruptionPolicy,
    Job,
    JobMarket,
    JobWorkdir,
    Market,
    Placement,
)
from instances.selectors.clusters import order_size_bounds
from instances.selectors.jobs import job_archive
from instances.services.approvals import order_cancel
from instances.services.jobs.lifecycle import job_transition
from instances.services.orders import order_submit, order_validate
from instances.services.transitions import actor_of
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User

# A job's order: its market and what its spot hosts do when the cloud takes one back.
ORDER_OF_MARKET = {
    JobMarket.ON_DEMAND: (Market.ON_DEMAND, ""),
    JobMarket.SPOT: (Market.SPOT, InterruptionPolicy.RELAUNCH_SPOT),
    JobMarket.SPOT_THEN_ON_DEMAND: (Market.SPOT, InterruptionPolicy.FALLBACK_ON_DEMAND),
}
COMMAND_MAX_BYTES = 64 * 1024
ENV_MAX_VARIABLES = 64
ENV_VALUE_MAX_BYTES = 4096
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by the portal on every run; a job's own variables cannot replace them.
ENV_RESERVED = frozenset({"CHECKPOINT_DIR", "TENSORBOARD_LOG_DIR", "JOB_ID", "JOB_RECOVERY"})
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGHUP")
EXIT_CODES_MAX = 32
# (low, high) of each number a job takes; None as high: a setting, read when asked.
JOB_BOUNDS = {
    "time_limit_minutes": (1, None),
    "max_recoveries": (0, 1000),
    "max_restarts": (0, 100),
    "grace_seconds": (0, 600),
    "keep_host_minutes": (0, 24 * 60),
}
# What a re-run copies from the job it re-runs.
SETTINGS = (
    "project",
    "name",
    "command",
    "env",
    "market",
    "max_recoveries",
    "max_restarts",
    "retry_exit_codes",
    "time_limit_minutes",
    "stop_signal",
    "grace_seconds",
    "keep_host_minutes",
    "workdir_git",
    "workdir_ref",
)
# A repository the agent clones: https, a host, no credentials in the URL (a token in it would
# be shown on the job's page); a ref is a branch, tag or commit name, never an option.
GIT_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~/%+-]+")
# How much bigger than the upload its files may be (a small archive that unpacks to gigabytes
# is refused while it is read).
WORKDIR_UNPACKED_TIMES = 32
GIT_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")


def job_bounds(name: str) -> tuple[int, int]:
    low, high = JOB_BOUNDS[name]
    if name == "time_limit_minutes":
        high = settings.PORTAL_JOB_MAX_TIME_LIMIT_MINUTES
    return low, high


def _nul(value: str) -> bool:
    return "\x00" in value


def job_problems(
    *,
    name: str,
    command: str,
    env: dict,
    time_limit_minutes: int,
    max_recoveries: int | None,
    max_restarts: int,
    retry_exit_codes: list,
    stop_signal: str,
    grace_seconds: int,
    keep_host_minutes: int,
    market: str,
) -> dict[str, list[str]]:
    """Every problem with a job's own fields, named by field (the order's fields are
    order_validate's)."""
    problems: dict[str, list[str]] = {}

    def refuse(field: str, sentence: str) -> None:
        problems.setdefault(field, []).append(sentence)

    if not name.strip() or len(name) > 100 or _nul(name):
        refuse("name", "A job's name is 1 to 100 characters, without NUL characters.")
    if not command.strip():
        refuse("command", "The command is empty; give the shell line the job runs.")
    elif len(command.encode()) > COMMAND_MAX_BYTES:
        refuse(
            "command",
            f"The command is over {COMMAND_MAX_BYTES // 1024} KiB; put the script in a file "
            "and run that.",
        )
    elif _nul(command):
        refuse("command", "The command contains a NUL character.")
    if market not in JobMarket.values:
        refuse("market", "market accepts on_demand, spot or spot_then_on_demand.")
    if not isinstance(env, dict) or len(env) > ENV_MAX_VARIABLES:
        refuse("env", f"env is an object of at most {ENV_MAX_VARIABLES} variables.")
    else:
        for key, value in env.items():
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                refuse("env", f"{str(key)[:40]!r} is not a variable name (letters, digits, _).")
            elif key in ENV_RESERVED or key.startswith("PORTAL_"):
                refuse("env", f"{key} is set by the portal on every run; pick another name.")
            elif not isinstance(value, str) or _nul(value):
                refuse("env", f"{key}'s value must be a string without NUL characters.")
            elif len(value.encode()) > ENV_VALUE_MAX_BYTES:
                refuse("env", f"{key}'s value is over {ENV_VALUE_MAX_BYTES} bytes.")
    numbers = {
        "time_limit_minutes": time_limit_minutes,
        "max_restarts": max_restarts,
        "grace_seconds": grace_seconds,
        "keep_host_minutes": keep_host_minutes,
    }
    if max_recoveries is not None:
        numbers["max_recoveries"] = max_recoveries
    for field, value in numbers.items():
        low, high = job_bounds(field)
        if not isinstance(value, int) or not low <= value <= high:
            refuse(field, f"{field} must be between {low} and {high}.")
    if not isinstance(retry_exit_codes, list) or len(retry_exit_codes) > EXIT_CODES_MAX:
        refuse("retry_exit_codes", f"retry_exit_codes lists at most {EXIT_CODES_MAX} exit codes.")
    elif any(not isinstance(code, int) or not 1 <= code <= 255 for code in retry_exit_codes):
        refuse("retry_exit_codes", "An exit code that means retry is between 1 and 255.")
    if stop_signal not in STOP_SIGNALS:
        refuse("stop_signal", f"stop_signal is one of {', '.join(STOP_SIGNALS)}.")
    return problems


def workdir_problems(*, tarball: bytes | None, git: str, ref: str) -> dict[str, list[str]]:
    """What is wrong with a job's working folder: a tar archive (every member a plain file or
    folder inside it, as tarfile's "data" filter allows) within PORTAL_JOB_WORKDIR_MAX_BYTES,
    or a git repository's https URL and an optional ref; not both."""
    cap = settings.PORTAL_JOB_WORKDIR_MAX_BYTES
    if tarball is not None and git:
        return {
            "workdir_git": ["Give a tarball or a git repository for the working folder, not both."]
        }
    if tarball is not None:
        if len(tarball) > cap:
            return {
                "workdir_tarball": [
                    f"The working folder is over the {cap:,} bytes a job may upload; put the "
                    "project in a git repository and give its URL instead."
                ]
            }
        try:
            unpacked = 0
            with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:*") as archive:
                for member in archive:
                    tarfile.data_filter(member, "/nonexistent")
                    unpacked += member.size
                    if unpacked > WORKDIR_UNPACKED_TIMES * cap:
                        raise ValueError(
                            f"it unpacks to over {WORKDIR_UNPACKED_TIMES * cap:,} bytes"
                        )
        except (tarfile.TarError, EOFError, OSError, ValueError) as error:
            named = isinstance(error, (tarfile.FilterError, ValueError))
            reason = str(error) if named else "it is not one"
            return {"workdir_tarball": [f"The working folder must be a tar archive: {reason}."]}
    if git and (len(git) > 2000 or not GIT_URL.fullmatch(git)):
        return {
            "workdir_git": [
                "The git repository is an https:// URL without credentials in it, such as "
                "https://github.com/lab/project.git."
            ]
        }
    if ref and (not git or not GIT_REF.fullmatch(ref)):
        return {
            "workdir_ref": [
                "workdir_ref names a branch, tag or commit of workdir_git (letters, digits, "
                "., _, / and -, not starting with -)."
            ]
        }
    return {}


def lease_hours_for(time_limit_minutes: int) -> int:
    """The job's order's lease: its time limit in whole hours (a job never outlives it)."""
    return max(1, math.ceil(time_limit_minutes / 60))


def job_submit(
    *,
    requester: User,
    project: Project,
    instance_type: InstanceType,
    image: Image,
    market: str,
    name: str,
    command: str,
    env: dict | None = None,
    time_limit_minutes: int = 24 * 60,
    max_recoveries: int | None = None,
    max_restarts: int = 0,
    retry_exit_codes: list | None = None,
    stop_signal: str = "SIGTERM",
    grace_seconds: int = 30,
    keep_host_minutes: int = 0,
    ssh_public_key: str = "",
    workdir: bytes | None = None,
    workdir_git: str = "",
    workdir_ref: str = "",
    nodes: int = 1,
    mig_profile: str = "",
    rerun_of: Job | None = None,
    idempotency_key: str | None = None,
) -> Job:
    """Check a job field by field (its own fields and its order's, all at once), then place its
    order (of one host, or of a cluster of ``nodes``) through the order admission (quota,
    budget, approval policy) and write the job, pending, in one transaction.
    ``idempotency_key``: a page's submission key, so a double click submits one job (the
    first one comes back)."""
    env = {} if env is None else env
    retry_exit_codes = [] if retry_exit_codes is None else retry_exit_codes
    problems = job_problems(
        name=name,
        command=command,
        env=env,
        time_limit_minutes=time_limit_minutes,
        max_recoveries=max_recoveries,
        max_restarts=max_restarts,
        retry_exit_codes=retry_exit_codes,
        stop_signal=stop_signal,
        grace_seconds=grace_seconds,
        keep_host_minutes=keep_host_minutes,
        market=market,
    )
    problems.update(workdir_problems(tarball=workdir, git=workdir_git, ref=workdir_ref))
    cluster = nodes != 1
    least, most = order_size_bounds(Placement.CLUSTER)
    if cluster and not (isinstance(nodes, int) and least <= nodes <= most):
        problems["nodes"] = [
            f"nodes is 1 (a job on one host) or {least} to {most} (a cluster job, "
            "MultiWorkerMirroredStrategy across its nodes)."
        ]
    if cluster and isinstance(env, dict) and "TF_CONFIG" in env:
        problems.setdefault("env", []).append(
            "TF_CONFIG is set by the portal on every node of a cluster job; leave it out."
        )
    if mig_profile and market != JobMarket.ON_DEMAND:
        problems.setdefault("market", []).append(
            "A job on a MIG slice runs on-demand: a spot shared host's slices end with it."
        )
    order_market, policy = ORDER_OF_MARKET.get(market, (Market.ON_DEMAND, ""))
    order_fields = {
        "requester": requester,
        "project": project,
        "instance_type": instance_type,
        "image": image,
        "market": order_market,
        "count": nodes,
        "placement": Placement.CLUSTER if cluster else Placement.INDEPENDENT,
        "lease_hours": lease_hours_for(time_limit_minutes)
        if isinstance(time_limit_minutes, int) and time_limit_minutes > 0
        else 1,
        "ssh_public_key": ssh_public_key,
        "interruption_policy": policy,
        "mig_profile": mig_profile,
    }
    try:
        order_validate(**order_fields, key_required=bool(ssh_public_key))
    except ValidationError as error:
        if not hasattr(error, "error_dict"):
            raise
        for field, errors in error.message_dict.items():
            if field == "interruption_policy" and mig_profile:
                continue  # a slice job's market is said above, in a job's words
            # The job's market stands for the order's market and interruption policy.
            field = "market" if field in ("interruption_policy",) else field
            if field == "lease_hours":
                field = "time_limit_minutes"
            if field in ("count", "placement", "nodes"):
                if field != "placement" and "nodes" in problems:
                    continue  # said above, in a job's words
                field = "nodes"
            problems.setdefault(field, []).extend(errors)
    if problems:
        raise ValidationError(problems)
    with transaction.atomic():
        order, created = order_submit(
            **order_fields,
            key_required=bool(ssh_public_key),
            idempotency_key=idempotency_key,
        )
        if not created and hasattr(order, "job"):
            return order.job
        job = Job.objects.create(
            project=project,
            owner=requester,
            order=order,
            name=name.strip(),
            command=command,
            env=env,
            market=market,
            max_recoveries=max_recoveries,
            max_restarts=max_restarts,
            retry_exit_codes=sorted(set(retry_exit_codes)),
            time_limit_minutes=time_limit_minutes,
            stop_signal=stop_signal,
            grace_seconds=grace_seconds,
            keep_host_minutes=keep_host_minutes,
            workdir_git=workdir_git,
            workdir_ref=workdir_ref,
            rerun_of=rerun_of,
            status_reason=_waiting(order),
        )
        if workdir is not None:
            JobWorkdir.objects.create(
                job=job, data=workdir, size=len(workdir), sha256=hashlib.sha256(workdir).hexdigest()
            )
    return job


def _waiting(order) -> str:
    if order.status == order.Status.PENDING_APPROVAL:
        return f"waiting for approval: {order.approval_reason}"
    return Job.WAITING_FOR_HOST


def _require_actor(job: Job, user: User, verb: str) -> None:
    if not permissions.can_act_on_job(user, job):
        raise Forbidden(f"You can see this job but not {verb} it; ask its owner.")


def job_cancel(*, job: Job, user: User) -> Job:
    """Cancel a job that has not ended: its hosts end, its agent stops the command (with the
    job's stop signal and grace)."""
    _require_actor(job, user, "cancel")
    if job.is_ended:
        raise Conflict(
            f"This job has {job.get_status_display().lower()}; there is nothing to cancel.",
            code="invalid_state",
        )
    job, _ = job_transition(
        job=job,
        to=Job.Status.CANCELLED,
        reason=f"cancelled by {user.username}",
        actor=actor_of(user),
    )
    if job.order.status == job.order.Status.PENDING_APPROVAL:
        order_cancel(order=job.order, user=user, reason=f"job {job.name} was cancelled")
    return job


def job_rerun(*, job: Job, user: User) -> Job:
    """A new job with the settings of one that has ended, submitted as it was (the same
    checks: a type retired since then is refused)."""
    _require_actor(job, user, "re-run")
    if not job.is_ended:
        raise Conflict(
            "This job has not ended; cancel it first or wait for it to end.",
            code="invalid_state",
        )
    order = job.order
    return job_submit(
        requester=user,
        instance_type=order.instance_type,
        image=order.image,
        ssh_public_key=order.ssh_public_key,
        workdir=job_archive(job),
        nodes=job.nodes,
        mig_profile=order.mig_profile.name if order.is_mig_slice else "",
        rerun_of=job,
        **{name: getattr(job, name) for name in SETTINGS},
    )
