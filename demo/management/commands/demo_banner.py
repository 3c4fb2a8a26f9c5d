"""``make run``'s last words: once web, worker and beat answer /health/, the URL and the demo
logins, once, below the processes' own start-up lines (the development server's request lines
are off unless PORTAL_REQUEST_LOG=1, so nothing scrolls it away). Then it waits quietly for
Ctrl-C (honcho stops every process when one ends)."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.core.management.base import BaseCommand

from demo.management.commands.seed_demo import PEOPLE

WAIT_SECONDS = 90


class Command(BaseCommand):
    help = "Wait for the portal to be up, then print its URL and the demo logins (make run)."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args, **options):
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        url = options["url"].rstrip("/") + "/"
        state = self.wait_for(url, stop)
        if stop.is_set():
            return
        lines = [
            "",
            "=" * 66,
            f"  GPU Portal is up: {url}",
            f"  Demo logins (password: {settings.PORTAL_DEMO_PASSWORD})",
        ]
        for username, _, _, role, memberships in PEOPLE:
            where = ", ".join(f"{slug} {kind}" for slug, kind in memberships) or "all projects"
            lines.append(f"    {username:<6} {role.label:<11} {where}")
        if state != "ok":
            lines.append(f"  (health: {state}; see {url}health/)")
        lines += ["  Ctrl-C stops web, worker and beat.", "=" * 66, ""]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
        stop.wait()

    def wait_for(self, url: str, stop: threading.Event) -> str:
        """Until /health/ says ok (database, broker, beat and the workers: the other processes'
        start-up lines are then printed, so the banner comes last), or WAIT_SECONDS pass: its
        state."""
        deadline = time.monotonic() + WAIT_SECONDS
        state = "not answering"
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}health/", timeout=5) as answer:  # noqa: S310
                    body = json.load(answer)
                state = body.get("status", "unknown")
                if state == "ok":
                    return "ok"
            except (urllib.error.URLError, OSError, ValueError):
                pass
            stop.wait(1)
        return state
