"""What operators see of Celery: task metrics, beat's heartbeat, queue depth, worker presence.

Beat's heartbeat: when beat sends a periodic task (django-celery-beat names it in the
``periodic_task_name`` header), the time is stored per task, in Redis when the broker is Redis
and in a small JSON file under ``var/`` for the embedded default. /health/ and /metrics read it
there, so the web process knows whether beat is alive without asking beat. The schedule comes
from CELERY_BEAT_SCHEDULE; an entry is stale when two of its periods have passed since its last
run, or since beat started when that is later (beat sends a task first one period after it
starts, so a daily task that has not run yet is not late on the demo's first day).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from celery.signals import beat_init, before_task_publish, task_postrun, task_prerun, task_retry
from django.conf import settings
from prometheus_client.core import Metric

from portal.metrics import TASK_SECONDS, TASKS, gauge

log = logging.getLogger(__name__)

BEAT_KEY = "portal:beat:last_run"
BEAT_FILE = "beat-last-run.json"
BEAT_STARTED_KEY = "portal:beat:started"
BEAT_STARTED_FILE = "beat-started.json"
_started: dict[str, float] = {}
_in_beat = False


# --- task metrics ---------------------------------------------------------------------------


@task_prerun.connect(dispatch_uid="portal.ops.task_prerun")
def _task_started(sender=None, task_id=None, **kwargs):
    if task_id is not None:
        _started[task_id] = time.perf_counter()


@task_postrun.connect(dispatch_uid="portal.ops.task_postrun")
def _task_finished(sender=None, task_id=None, state=None, **kwargs):
    started = _started.pop(task_id, None)
    name = getattr(sender, "name", "unknown")
    if state == "RETRY":
        return  # counted by task_retry, which knows it was one
    TASKS.labels(name, "success" if state == "SUCCESS" else "failure").inc()
    if started is not None:
        TASK_SECONDS.labels(name).observe(time.perf_counter() - started)


@task_retry.connect(dispatch_uid="portal.ops.task_retry")
def _task_retried(sender=None, **kwargs):
    TASKS.labels(getattr(sender, "name", "unknown"), "retry").inc()


# --- beat's heartbeat ------------------------------------------------------------------------


def _redis():
    import redis

    return redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2
    )


def _uses_redis() -> bool:
    return settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://"))


def beat_record(name: str, at: float | None = None) -> None:
    """Note that beat sent periodic task ``name`` now (seconds since the epoch)."""
    at = time.time() if at is None else at
    if _uses_redis():
        _redis().hset(BEAT_KEY, name, repr(at))
        return
    path = Path(settings.VAR_DIR) / BEAT_FILE
    runs = _read_file(path)
    runs[name] = at
    # One beat writes; replace the file whole so a reader never sees half of it.
    spare = path.with_suffix(f".{os.getpid()}.tmp")
    spare.write_text(json.dumps(runs))
    spare.replace(path)


def _read_file(path: Path) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def beat_last_runs() -> dict[str, float]:
    """Periodic task name -> when beat last sent it (seconds since the epoch): one read."""
    if _uses_redis():
        raw = _redis().hgetall(BEAT_KEY)
        return {k.decode(): float(v) for k, v in raw.items()}
    return _read_file(Path(settings.VAR_DIR) / BEAT_FILE)


def beat_started_record(at: float | None = None) -> None:
    """Note that beat started now (seconds since the epoch)."""
    at = time.time() if at is None else at
    if _uses_redis():
        _redis().set(BEAT_STARTED_KEY, repr(at))
        return
    path = Path(settings.VAR_DIR) / BEAT_STARTED_FILE
    spare = path.with_suffix(f".{os.getpid()}.tmp")
    spare.write_text(json.dumps({"started": at}))
    spare.replace(path)


def beat_started_at() -> float | None:
    """When beat last started (seconds since the epoch), or None if it never did."""
    if _uses_redis():
        raw = _redis().get(BEAT_STARTED_KEY)
        return float(raw) if raw is not None else None
    return _read_file(Path(settings.VAR_DIR) / BEAT_STARTED_FILE).get("started")


def beat_clear() -> None:
    if _uses_redis():
        _redis().delete(BEAT_KEY, BEAT_STARTED_KEY)
    else:
        (Path(settings.VAR_DIR) / BEAT_FILE).unlink(missing_ok=True)
        (Path(settings.VAR_DIR) / BEAT_STARTED_FILE).unlink(missing_ok=True)


@beat_init.connect(dispatch_uid="portal.ops.beat_init")
def _beat_started(sender=None, **kwargs):
    global _in_beat
    _in_beat = True
    try:
        beat_started_record()
    except Exception:
        log.warning("beat: could not record its start", exc_info=True)


@before_task_publish.connect(dispatch_uid="portal.ops.beat_publish")
def _beat_sent(sender=None, headers=None, **kwargs):
    # Only beat's own sends count; the admin's "run now" carries the same header.
    name = (headers or {}).get("periodic_task_name")
    if _in_beat and name:
        try:
            beat_record(name)
        except Exception:
            log.warning("beat: could not record the run of %s", name, exc_info=True)


def _period(entry: dict) -> float | None:
    schedule = entry.get("schedule")
    if isinstance(schedule, int | float):
        return float(schedule)
    if isinstance(schedule, timedelta):
        return schedule.total_seconds()
    run_every = getattr(schedule, "run_every", None)
    return run_every.total_seconds() if isinstance(run_every, timedelta) else None


@dataclass
class BeatState:
    ok: bool
    reason: str
    stale: list[str]


def beat_state(now: float | None = None) -> BeatState:
    """Alive when every scheduled task ran within two of its periods (counted from beat's start
    when that is later than the task's last run); else which did not."""
    now = time.time() if now is None else now
    runs = beat_last_runs()
    started = beat_started_at()
    if not runs and started is None:
        return BeatState(False, "beat has never sent a periodic task", [])
    stale = []
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        period = _period(entry)
        if period is None:
            continue
        since = max(runs.get(name, 0.0), started or 0.0)
        if now - since > 2 * period:
            stale.append(name)
    if stale:
        last_sign = (
            f"beat's last send was {now - max(runs.values()):.0f} s ago"
            if runs
            else f"beat started {now - started:.0f} s ago and has sent nothing since"
        )
        return BeatState(
            False,
            f"no run within two periods of {', '.join(sorted(stale))}; {last_sign}",
            sorted(stale),
        )
    return BeatState(True, "ok", [])


# --- worker presence --------------------------------------------------------------------------


# The last ping's answer and when it was asked: /health/ is asked often (load balancers, compose)
# and a ping nobody answers takes its whole timeout, so one answer serves for a few seconds.
PING_REUSE_SECONDS = 10.0
_last_ping: dict[str, tuple[float, bool, str]] = {}
_ping_lock = threading.Lock()


def forget_worker_ping() -> None:
    _last_ping.clear()


def workers_state() -> tuple[bool, str]:
    """Whether a worker answered a ping within PORTAL_HEALTH_PING_SECONDS (the first answer
    will do), asked at most once per PING_REUSE_SECONDS in this process."""
    with _ping_lock:
        asked = _last_ping.get("ping")
        if asked and time.monotonic() - asked[0] < PING_REUSE_SECONDS:
            return asked[1], asked[2]
        ok, reason = ping_workers()
        _last_ping["ping"] = (time.monotonic(), ok, reason)
        return ok, reason


def ping_workers() -> tuple[bool, str]:
    from portal.celery import app

    timeout = settings.PORTAL_HEALTH_PING_SECONDS
    try:
        replies = app.control.inspect(timeout=timeout, limit=1).ping() or {}
    except Exception as error:  # noqa: BLE001 - any failure means no worker answered
        return False, f"ping failed: {type(error).__name__}"
    if not replies:
        return False, f"no worker answered a ping within {timeout} s"
    return True, f"{next(iter(replies))} answered"


def health_report() -> dict:
    """The operator's part of /health/: beat and workers. Reported, not fatal: pages and the
    API keep working without them, so /health/ stays 200 and says "degraded"."""
    beat = beat_state()
    workers_ok, workers_reason = workers_state()
    return {
        "beat": "ok" if beat.ok else "stale",
        "beat_reason": beat.reason,
        "workers": "ok" if workers_ok else "missing",
        "workers_reason": workers_reason,
    }


# --- scrape-time collectors ---------------------------------------------------------------------


def queue_names() -> list[str]:
    queues = {"celery"}
    queues.update(route["queue"] for route in settings.CELERY_TASK_ROUTES.values())
    return sorted(queues)


def collect_queues() -> Iterable[Metric]:
    """Messages waiting per Celery queue: one LLEN per queue in one Redis round trip."""
    family = gauge("portal_celery_queue_length", "Messages waiting in a Celery queue.", ["queue"])
    names = queue_names()
    if _uses_redis():
        pipe = _redis().pipeline()
        for name in names:
            pipe.llen(name)
        for name, length in zip(names, pipe.execute(), strict=True):
            family.add_metric([name], length)
    else:
        from portal.celery import app

        with app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
            channel = conn.default_channel
            for name in names:
                try:
                    family.add_metric([name], channel._size(name))
                except Exception:  # noqa: BLE001 - a queue not made yet holds nothing
                    family.add_metric([name], 0)
    yield family


def collect_beat() -> Iterable[Metric]:
    now = time.time()
    runs = beat_last_runs()
    last = gauge(
        "portal_beat_last_run_timestamp_seconds",
        "When beat last sent each periodic task (seconds since the epoch).",
        ["task"],
    )
    age = gauge(
        "portal_beat_last_run_age_seconds",
        "Seconds since beat last sent each periodic task.",
        ["task"],
    )
    for name, at in sorted(runs.items()):
        last.add_metric([name], at)
        age.add_metric([name], max(now - at, 0))
    yield last
    yield age
