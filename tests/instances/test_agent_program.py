"""The host agent itself (instances/agent/portal_agent.py), run as a host runs it: its own
python3 process, nvidia-smi on the PATH (here a script printing what a p4d's would), the
portal at the end of a real HTTP connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from instances import services
from instances.models import GpuReading

pytestmark = pytest.mark.django_db(transaction=True)
AGENT = Path(__file__).resolve().parents[2] / "instances" / "agent" / "portal_agent.py"


@pytest.fixture
def host(running_host, catalog):
    return running_host(instance_type=catalog["p4d.24xlarge"])  # eight A100s of 40 GiB


def run_agent(live_server, host, tmp_path, smi_lines: list[str], spool_lines=()):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'CSV'\n" + "\n".join(smi_lines) + "\nCSV\n")
    smi.chmod(0o755)
    spool = tmp_path / "spool" / "spool.jsonl"
    if spool_lines:
        spool.parent.mkdir(exist_ok=True)
        spool.write_text("".join(json.dumps(line) + "\n" for line in spool_lines))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PORTAL_AGENT_URL": live_server.url,
        "PORTAL_INSTANCE_ID": str(host.pk),
        "PORTAL_AGENT_TOKEN": services.agent_credential_issue(instance=host),
        "PORTAL_AGENT_SPOOL": str(spool),
    }
    done = subprocess.run(
        [sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=60
    )
    return done, spool


def test_the_agent_posts_each_gpus_reading_with_the_hosts_totals(live_server, host, tmp_path):
    done, spool = run_agent(
        live_server,
        host,
        tmp_path,
        ["0, 91, 30000, 40960", "1, 40, 2000, 40960", "2, 0, 0, 40960"],
    )
    assert done.returncode == 0, done.stderr
    row = GpuReading.objects.get(instance=host)
    assert (row.utilization, row.memory_used_mib) == (44, 32_000)  # mean 43.7, sum
    # [index, utilization, memory used, memory total], as the row keeps each GPU.
    assert row.gpus == [[0, 91, 30000, 40960], [1, 40, 2000, 40960], [2, 0, 0, 40960]]
    assert not spool.exists()  # stored: nothing kept for later


def test_a_gpu_nvidia_smi_cannot_read_is_left_out_and_said_so(live_server, host, tmp_path):
    done, _ = run_agent(
        live_server, host, tmp_path, ["0, 80, 1000, 40960", "1, [N/A], [N/A], 40960"]
    )
    assert done.returncode == 0, done.stderr
    assert "unreadable GPU line: 1, [N/A], [N/A], 40960" in done.stderr
    row = GpuReading.objects.get(instance=host)
    assert row.gpus == [[0, 80, 1000, 40960]]
    assert (row.utilization, row.memory_used_mib) == (80, 1000)


def test_a_refused_reading_in_the_spool_is_dropped_and_the_rest_still_stored(
    live_server, host, tmp_path
):
    earlier = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    bad = {"at": earlier, "utilization": 50, "memory_used_mib": 0, "gpus": [{"index": 99}]}
    done, spool = run_agent(live_server, host, tmp_path, ["0, 70, 500, 40960"], [bad])
    assert done.returncode == 0, done.stderr
    assert "portal refused readings" in done.stderr
    assert "readings.0" in done.stderr
    # The minute just read was sound and reached the portal on the second post.
    row = GpuReading.objects.get(instance=host)
    assert row.gpus == [[0, 70, 500, 40960]]
    assert not spool.exists()


def test_an_unreachable_portal_keeps_the_spool_until_the_next_minute_reaches_it(
    live_server, host, tmp_path
):
    down = type("Down", (), {"url": "http://127.0.0.1:9"})()  # nothing listens on port 9
    done, spool = run_agent(down, host, tmp_path, ["0, 60, 400, 40960"])
    assert done.returncode == 1
    assert "portal unreachable" in done.stderr and "1 readings kept" in done.stderr
    (kept,) = [json.loads(line) for line in spool.read_text().splitlines()]
    assert kept["utilization"] == 60 and not GpuReading.objects.exists()

    # A minute later the portal answers: the kept reading goes with the new one.
    kept["at"] = (datetime.fromisoformat(kept["at"]) - timedelta(minutes=1)).isoformat()
    spool.write_text(json.dumps(kept) + "\n")
    done, spool = run_agent(live_server, host, tmp_path, ["0, 70, 500, 40960"])
    assert done.returncode == 0, done.stderr
    assert sorted(GpuReading.objects.values_list("utilization", flat=True)) == [60, 70]
    assert not spool.exists()
