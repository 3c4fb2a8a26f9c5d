"""A real Celery worker process for tests, against the test database and the configured broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import time_machine
from django.conf import settings
from django.db import connection

from portal.celery import app as celery_app

ROOT = Path(__file__).resolve().parents[1]
QUEUES = ("celery", "provisioning")


def trial_count(name: str, default: int) -> int:
    """How many times a kill-loop test repeats, from the environment (``PORTAL_TEST_<NAME>``)
    or its default: the defaults are what CI runs, enough to land kills in the windows the
    tests exist for (each test prints how many did); fewer serve a quick local look."""
    raw = os.environ.get(f"PORTAL_TEST_{name}", "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"PORTAL_TEST_{name} must be a whole number of trials, not {raw!r}")
    return int(raw)


def database_url() -> str:
    """The URL of the database the tests are using right now (pytest-django's test copy)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] or "postgres"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return (
        f"postgres://{user}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )


def purge_queues() -> None:
    """Drop messages an earlier run left behind, so this worker sees only this test's tasks.

    On Redis that includes the unacked messages of workers a chaos test killed, which Redis
    would otherwise hand to the next worker once their visibility timeout ran out.
    """
    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        client.delete("unacked", "unacked_index", "unacked_mutex")
    with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
        channel = conn.default_channel
        for queue in QUEUES:
            try:
                channel.queue_purge(queue)
            except Exception:  # noqa: BLE001 - a queue that does not exist yet has nothing to purge
                channel = conn.channel()


class Worker:
    """`celery -A portal worker` in its own process group, so SIGKILL takes all of it down."""

    def __init__(self, *, beat: bool = False, name: str = "", **env: str) -> None:
        # beat=True embeds Celery beat (-B) with the database schedule, as production's beat.
        # name: tells workers running side by side apart (a node name each).
        self.beat = beat
        self.name = name
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "PORTAL_VAR_DIR": str(settings.VAR_DIR),
            "PORTAL_SIMULATED_BOOT_SECONDS": "0",
            **env,
        }
        self.process: subprocess.Popen | None = None
        self.output: list[str] = []
        self._ready = threading.Event()

    def start(self, timeout: float = 30) -> Worker:
        if time_machine.escape_hatch.is_travelling():
            # The worker stamps rows with the wall clock while this process would compare them
            # with a travelled one: thresholds such as "stuck for 60 s" would silently lie.
            raise RuntimeError(
                "a real worker runs on the wall clock: mark this test "
                "@pytest.mark.real_clock (tests/clock.py)"
            )
        self._ready.clear()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--queues",
                ",".join(QUEUES),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"test-{os.getpid()}{'-' + self.name if self.name else ''}@%h",
                *(["--beat"] if self.beat else []),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        if not self._ready.wait(timeout):
            self.stop()
            raise RuntimeError("worker did not start:\n" + "".join(self.output[-40:]))
        return self

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.output.append(line)
            if " ready." in line:
                self._ready.set()

    def kill(self) -> None:
        """SIGKILL the whole worker: no warm shutdown, no acks, no goodbyes."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(
    check,
    timeout: float = 60,
    *,
    every: float = 0.2,
    what: str = "",
    detail=None,
    tolerate: tuple[type[BaseException], ...] = (),
):
    """``check()`` once it is truthy, asked every ``every`` seconds. ``tolerate``: errors that
    mean "not yet" (a file a process has not written yet: OSError). After ``timeout`` seconds, a
    failure that names ``what`` (or the check) and ends with ``detail()`` (a job's log, say), so
    that a run that timed out can be read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except tolerate:
            value = None
        if value:
            return value
        time.sleep(every)
    said = f"\n{detail()}" if detail else ""
    raise AssertionError(f"waited {timeout} s for {what or check.__doc__ or check}{said}")
