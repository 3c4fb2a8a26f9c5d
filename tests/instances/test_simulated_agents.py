"""The simulated cloud's host agents (instances/providers/simulated_agents.py): one real job
agent process per simulated host, asking a fake portal (tests/instances/agent_helpers.py) for
its runs."""

from __future__ import annotations

import contextlib
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from instances.providers.simulated_agents import HostAgents
from tests.instances.agent_helpers import alive, start_time, wait_for

pytestmark = pytest.mark.real_clock
HOST = "b5f7c1de-0000-4000-8000-000000000002"
JOB = "6d1c3a7e-2b4f-4e8a-9c1d-000000000007"
FAST = {"PORTAL_AGENT_POLL_SECONDS": "0.2"}


def job(command: str, grace: int = 30) -> dict:
    env = {"CHECKPOINT_DIR": "checkpoints", "JOB_ID": JOB, "JOB_RECOVERY": "0"}
    return {"job": JOB, "run": 1, "command": command, "env": env, "stop_signal": "SIGTERM"} | {
        "grace_seconds": grace,
        "stop": False,
    }


@pytest.fixture
def agents(tmp_path):
    """HostAgents under a temporary root; every agent and job left is killed at the end."""
    hosts = HostAgents(tmp_path / "hosts")
    yield hosts
    for folder in (tmp_path / "hosts").glob("*"):
        pids = [hosts.pid(folder.name), *hosts.job_pids(folder.name)]
        for pid in filter(None, pids):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        hosts.end(folder.name, grace=0)


def test_ensure_starts_one_agent_per_host_and_leaves_a_live_one_alone(portal, agents, tmp_path):
    pid = agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST)
    wait_for(lambda: len(portal.server.requests) >= 2)  # it asks the portal for its runs
    assert agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST) == pid
    assert agents.pid(HOST) == pid and os.getpgid(pid) == pid  # detached: a session of its own
    _, path, headers, _ = portal.server.requests[0]
    assert path == f"/api/v1/instances/{HOST}/job/"
    assert headers["Authorization"] == "Agent gpa_one"
    assert (tmp_path / "hosts" / HOST / "jobs").is_dir()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"PORTAL_AGENT_WORKDIR={tmp_path}/hosts/{HOST}/jobs".encode() in environ
    assert not any(line.startswith(b"DJANGO_") for line in environ)  # not the portal's secrets


def test_end_stops_the_agent_which_stops_its_job_gracefully(portal, agents, tmp_path):
    portal.jobs = [job("trap 'echo saved; exit 0' TERM; echo ready; while :; do sleep 0.1; done")]
    agent = agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST)
    wait_for(lambda: b"ready" in portal.log)
    (job_pid,) = agents.job_pids(HOST)
    agents.end(HOST, grace=5)
    assert agents.pid(HOST) is None and agents.job_pids(HOST) == []
    assert not alive(agent) and not alive(job_pid)
    log = (tmp_path / "hosts" / HOST / "jobs" / JOB / "run-1.log").read_bytes()
    assert log.endswith(b"saved\n")
    assert portal.exits[0]["stopped"] is True  # the agent reported the stop before it ended
    agents.end(HOST)  # ending again does nothing


def test_end_kills_the_agent_and_a_job_group_that_outlasts_the_grace(portal, agents, tmp_path):
    folder = tmp_path / "hosts" / HOST / "jobs" / JOB
    portal.jobs = [job(f"trap '' TERM; sleep 60 & echo $! > {folder}/child; echo ready; wait")]
    agent = agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST)
    wait_for(lambda: b"ready" in portal.log)
    child = int((folder / "child").read_text())
    (job_pid,) = agents.job_pids(HOST)
    assert os.getpgid(child) == job_pid
    agents.end(HOST, grace=1)  # the job's own grace is 30 s: the host's end does not wait it
    wait_for(lambda: not alive(child) and not alive(job_pid) and not alive(agent), timeout=2)
    assert agents.pid(HOST) is None and agents.job_pids(HOST) == []


def test_hosts_ensured_at_once_by_many_portal_processes_get_one_agent_each(
    portal, agents, tmp_path
):
    hosts = [HOST, "b5f7c1de-0000-4000-8000-000000000003"] * 4
    workers = [HostAgents(tmp_path / "hosts") for _ in hosts]  # each with a child of its own

    def ensure(worker, host):
        return worker.ensure(host, url=portal.url, token="gpa_one", env=FAST)

    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        pids = list(pool.map(ensure, workers, hosts))
    assert pids == [agents.pid(host) for host in hosts] and len(set(pids)) == 2
    for worker, host in zip(workers, hosts, strict=True):
        worker.end(host, grace=0)  # the one that started an agent also reaps it
    assert [agents.pid(host) for host in hosts] == [None] * len(hosts)


def test_a_pid_given_to_another_process_is_not_taken_for_the_agent(portal, agents, tmp_path):
    folder = tmp_path / "hosts" / HOST
    (folder / "jobs" / JOB).mkdir(parents=True)
    # This test's own pid, with a start time it never had: the agent's pid reused after a reboot.
    (folder / "agent.pid").write_text(f"{os.getpid()} 1\n")
    (folder / "jobs" / JOB / "job.pid").write_text(f"{os.getpid()} 1 1\n")
    assert agents.pid(HOST) is None and agents.job_pids(HOST) == []
    agents.end(HOST, grace=0)  # kills nothing: this test is still here
    pid = agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST)
    assert pid != os.getpid() and agents.pid(HOST) == pid
    assert (folder / "agent.pid").read_text() == f"{pid} {start_time(pid)}\n"


def test_a_host_never_started_has_no_agent_and_ends_quietly(agents):
    assert agents.pid(HOST) is None and agents.job_pids(HOST) == []
    agents.end(HOST, grace=0)


def test_an_agent_left_by_another_portal_process_is_found_and_ended(portal, agents, tmp_path):
    pid = agents.ensure(HOST, url=portal.url, token="gpa_one", env=FAST)
    other = HostAgents(tmp_path / "hosts")  # a second worker: same folders, no child of its own
    assert other.pid(HOST) == pid
    assert other.ensure(HOST, url=portal.url, token="gpa_one", env=FAST) == pid
    other.end(HOST, grace=5)
    wait_for(lambda: not alive(pid))
    assert agents.pid(HOST) is None
