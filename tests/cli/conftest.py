"""Running the real ``gpu`` program (``python -m gpucli``) as a subprocess, with a config
folder and home of its own, against the live test server when a test has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ED25519

ROOT = Path(__file__).resolve().parents[2]


class Gpu:
    """``gpu ARGS`` with this test's environment; ``popen`` for a run the test acts during."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.config = tmp_path / "config"
        (self.home / ".ssh").mkdir(parents=True)
        self.key = self.home / ".ssh" / "id_ed25519.pub"
        self.key.write_text(ED25519 + "\n")
        self.env = {
            key: value for key, value in os.environ.items() if not key.startswith("GPU_PORTAL_")
        }
        self.env.update(
            {
                "HOME": str(self.home),
                "XDG_CONFIG_HOME": str(self.config),
                "PYTHONPATH": str(ROOT),
                "COLUMNS": "200",
            }
        )

    def connect(self, url: str, token: str | None = None) -> Gpu:
        self.env["GPU_PORTAL_URL"] = url
        if token:
            self.env["GPU_PORTAL_TOKEN"] = token
        return self

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "gpucli", *args]

    def __call__(self, *args: str, stdin: str = "", timeout: float = 60, **env: str):
        return subprocess.run(
            self.command(*args),
            input=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**self.env, **env},
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=self.env,
        )


@pytest.fixture
def gpu(tmp_path) -> Gpu:
    return Gpu(tmp_path)


@pytest.fixture
def token_of():
    """A personal token's secret for a user, issued as the API tokens page issues it."""
    from portal.services import token_issue

    def issue(user, name: str = "gpu test") -> str:
        return token_issue(user=user, name=name, days=1)[1]

    return issue
