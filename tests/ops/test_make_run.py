"""What `make run` starts each command with, read by running its recipe against a fake venv."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Stands in for the venv's python and honcho: records which command ran with which metrics folder.
RECORDER = """#!/bin/sh
echo "$(basename "$0") $1 $2 dir=${PROMETHEUS_MULTIPROC_DIR:-unset}" >> "$RECORD"
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_only_the_started_servers_count_into_the_metrics_folder(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "honcho"):
        tool = venv / "bin" / name
        tool.write_text(RECORDER)
        tool.chmod(0o755)
    # Newer than pyproject.toml and the lock, so make takes the venv as installed.
    (venv / ".installed").touch()
    record = tmp_path / "record"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["RECORD"] = str(record)
    result = subprocess.run(
        ["make", "--no-print-directory", "run", f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = record.read_text().splitlines()
    seeding = [line for line in lines if "seed_demo" in line or "migrate" in line]
    assert seeding and all(line.endswith("dir=unset") for line in seeding), lines
    (started,) = [line for line in lines if line.startswith("honcho")]
    assert started.endswith(f"dir={ROOT}/var/metrics"), started
