"""make run's banner: printed once, after /health/ says the whole portal is up, and not
scrolled away by the development server's request lines."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

from django.conf import settings

from demo.management.commands.demo_banner import Command

ROOT = Path(settings.BASE_DIR)


def answers(*bodies: dict):
    """urlopen standing in for the portal's /health/, answering these bodies in turn."""
    replies = iter(bodies)

    def urlopen(url, timeout):
        return io.BytesIO(json.dumps(next(replies)).encode())

    return urlopen


WORKERS_UP_BEAT_NOT = {"status": "degraded", "database": "ok", "workers": "ok", "beat": "stale"}
ALL_UP = {"status": "ok", "database": "ok", "workers": "ok", "beat": "ok"}


def test_the_banner_waits_until_beat_is_up_too():
    health = mock.Mock(side_effect=answers(WORKERS_UP_BEAT_NOT, ALL_UP))
    with mock.patch("urllib.request.urlopen", health):
        state = Command().wait_for("http://127.0.0.1:8000/", threading.Event())
    assert state == "ok"
    assert health.call_count == 2


def request_line_printed(**env: str) -> str:
    """What the development server's logger prints for one 200 and one 404, in a fresh process
    with the demo's environment (logging is set up once per process, from the settings)."""
    code = (
        "import django, logging; django.setup(); log = logging.getLogger('django.server'); "
        "log.info('\"GET /hosts/rows/ HTTP/1.1\" 200 812', extra={'status_code': 200}); "
        "log.warning('\"GET /nowhere/ HTTP/1.1\" 404 179', extra={'status_code': 404})"
    )
    environ = {
        **{k: v for k, v in os.environ.items() if k != "PORTAL_REQUEST_LOG"},
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "1",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout + done.stderr


def test_the_development_servers_request_lines_are_quiet_by_default_but_errors_print():
    printed = request_line_printed()
    assert "GET /hosts/rows/" not in printed
    assert "GET /nowhere/" in printed


def test_portal_request_log_turns_the_request_lines_back_on():
    printed = request_line_printed(PORTAL_REQUEST_LOG="1")
    assert "GET /hosts/rows/" in printed
    assert "GET /nowhere/" in printed
