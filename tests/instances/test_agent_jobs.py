"""The host agent's job mode (``portal_agent.py jobs``), run as a host runs it: its own python3
process, the job a real ``sh`` process group, and the portal (and IMDS) small HTTP servers in
this process that record every request and answer as each test scripts them."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.instances.agent_helpers import Recorder, alive, start_time, wait_for

pytestmark = pytest.mark.real_clock
AGENT = Path(__file__).resolve().parents[2] / "instances" / "agent" / "portal_agent.py"
JOB = "0b0e5a6c-7d1f-4b7e-9a55-3f1f3c2d9e01"
TOKEN = "gpa_host-secret"
# A host's python3 may be 3.8: PORTAL_TEST_AGENT_PYTHON=python3.8 runs the agent on that one.
AGENT_PYTHON = os.environ.get("PORTAL_TEST_AGENT_PYTHON", sys.executable)
LOOP = "echo ready; while :; do sleep 0.1; done"
TRAP = "trap 'echo saved; exit 0' TERM; " + LOOP


def spec(command: str, run: int = 1, **more) -> dict:
    env = {
        "CHECKPOINT_DIR": "checkpoints",
        "TENSORBOARD_LOG_DIR": "tensorboard",
        "JOB_ID": JOB,
        "JOB_RECOVERY": "0",
        "LAB": "vision",
    }
    env.update(more.pop("env", {}))
    return {"job": JOB, "run": run, "command": command, "env": env} | {
        "stop_signal": "SIGTERM",
        "grace_seconds": 5,
        "stop": False,
        **more,
    }


@pytest.fixture
def workdir(tmp_path):
    return tmp_path / "jobs"


@pytest.fixture
def groups(workdir):
    """Every process group a test starts (agents, and jobs through their job.pid), killed when
    the test ends whatever happened."""
    started: list[int] = []
    yield started
    for path in workdir.glob("*/job.pid"):
        pid, start = path.read_text().split()[:2]
        if alive(int(pid)) and start_time(int(pid)) == start:  # not a pid a test made up
            started.append(int(pid))
    for pid in started:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def agent(portal, workdir, tmp_path, groups):
    def start(**env) -> subprocess.Popen:
        bin_dir = tmp_path / "bin"
        variables = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PORTAL_AGENT_URL": portal.url,
            "PORTAL_INSTANCE_ID": "b5f7c1de-0000-4000-8000-000000000001",
            "PORTAL_AGENT_TOKEN": TOKEN,
            "PORTAL_AGENT_WORKDIR": str(workdir),
            "PORTAL_AGENT_POLL_SECONDS": "0.2",
            "PORTAL_AGENT_GIVE_UP_SECONDS": "30",
        } | env
        proc = subprocess.Popen(
            [AGENT_PYTHON, str(AGENT), "jobs"],
            env=variables,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        groups.append(proc.pid)
        return proc

    return start


def stopped(proc: subprocess.Popen, timeout=10.0) -> tuple[int, str]:
    """Ask the agent to stop as systemd does, and its exit status and stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def disk_log(workdir, run=1) -> bytes:
    return (workdir / JOB / f"run-{run}.log").read_bytes()


def test_a_job_that_prints_and_exits_sends_its_whole_log_and_its_exit_once(portal, agent, workdir):
    portal.jobs = [
        spec(
            'echo "dir=$CHECKPOINT_DIR id=$JOB_ID recovery=$JOB_RECOVERY lab=$LAB"; '
            'echo "tb=$TENSORBOARD_LOG_DIR token=${PORTAL_AGENT_TOKEN:-none} cwd=$(pwd)"'
        )
    ]
    proc = agent()
    wait_for(lambda: portal.exits)
    folder = workdir / JOB
    assert (
        bytes(portal.log)
        == disk_log(workdir)
        == (
            f"dir={folder}/checkpoints id={JOB} recovery=0 lab=vision\n"
            f"tb={folder}/tensorboard token=none cwd={folder}\n"
        ).encode()
    )
    assert portal.exits == [
        {"job": JOB, "run": 1, "exit_code": 0, "signal": None, "stopped": False}
        | {"interrupted": False}
    ]
    (started,) = portal.started
    assert started["job"] == JOB and started["run"] == 1
    pid, _, run = (folder / "job.pid").read_text().split()
    assert (int(pid), int(run)) == (started["pid"], 1)
    gets = len(portal.server.requests)
    wait_for(lambda: len(portal.server.requests) >= gets + 3)  # the agent asks on: 204s
    assert len(portal.exits) == 1
    assert stopped(proc)[0] == 0
    auth = {headers["Authorization"] for _, _, headers, _ in portal.server.requests}
    assert auth == {f"Agent {TOKEN}"}


def test_a_job_exiting_3_is_reported_with_its_code(portal, agent, workdir):
    portal.jobs = [spec("echo failing; exit 3")]
    agent()
    wait_for(lambda: portal.exits)
    assert portal.exits[0]["exit_code"] == 3 and portal.exits[0]["signal"] is None
    assert portal.exits[0]["stopped"] is False
    assert bytes(portal.log) == b"failing\n"


def test_a_stop_answer_sends_sigterm_and_the_jobs_trap_saves_before_it_exits(
    portal, agent, workdir
):
    portal.jobs = [spec(TRAP)]
    agent()
    wait_for(lambda: b"ready" in portal.log)
    portal.stop = True
    wait_for(lambda: portal.exits)
    assert portal.exits[0] | {"job": None} == {
        "job": None,
        "run": 1,
        "exit_code": 0,
        "signal": None,
        "stopped": True,
        "interrupted": False,
    }
    assert bytes(portal.log) == disk_log(workdir)
    assert portal.log.startswith(b"ready\n") and portal.log.endswith(b"saved\n")


def test_a_job_that_outlasts_its_grace_is_killed(portal, agent, workdir):
    portal.jobs = [spec("trap '' TERM; " + LOOP, grace_seconds=1)]
    agent()
    wait_for(lambda: b"ready" in portal.log)
    portal.stop = True
    asked = time.monotonic()
    wait_for(lambda: portal.exits)
    assert 0.9 <= time.monotonic() - asked < 5
    assert portal.exits[0]["signal"] == "SIGKILL" and portal.exits[0]["exit_code"] is None
    assert portal.exits[0]["stopped"] is True
    assert not alive(portal.started[0]["pid"])


def test_a_spot_warning_from_imds_stops_the_job_as_interrupted(portal, agent, workdir):
    def imds_answer(method, path, headers, body):
        if method == "PUT" and path == "/latest/api/token":
            assert headers["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"
            return 200, b"imds-token"
        if path == "/latest/meta-data/spot/instance-action" and warned.is_set():
            assert headers["X-aws-ec2-metadata-token"] == "imds-token"
            return 200, {"action": "terminate", "time": "2026-11-17T10:02:00Z"}
        return 404, b""

    warned = threading.Event()
    imds = Recorder(imds_answer)
    try:
        portal.jobs = [spec(TRAP)]
        agent(PORTAL_AGENT_IMDS_URL=imds.url)
        wait_for(lambda: b"ready" in portal.log)
        warned.set()
        wait_for(lambda: portal.exits)
    finally:
        imds.close()
    assert portal.exits[0]["interrupted"] is True and portal.exits[0]["stopped"] is True
    assert portal.log.startswith(b"ready\n") and portal.log.endswith(b"saved\n")


def test_a_host_the_portal_no_longer_knows_stops_its_job_and_the_agent_exits_0(
    portal, agent, workdir
):
    portal.jobs = [spec(TRAP)]
    proc = agent()
    wait_for(lambda: b"ready" in portal.log)
    portal.refuse = 401
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert disk_log(workdir).endswith(b"saved\n")
    assert not alive(portal.started[0]["pid"]) and portal.exits == []


def test_a_run_the_portal_no_longer_wants_is_stopped_without_an_exit(portal, agent, workdir):
    portal.jobs = [spec(TRAP)]
    portal.status["started"] = 409
    proc = agent()
    wait_for(lambda: b"saved" in disk_log(workdir))
    wait_for(lambda: json.loads((workdir / JOB / "exit-1.json").read_text())["reported"])
    assert stopped(proc)[0] == 0
    assert portal.posts("exit") == []


def test_a_portal_down_for_a_while_leaves_the_job_running_and_gets_the_whole_log_after(
    portal, agent, workdir
):
    portal.jobs = [spec("echo ready; sleep 2.5; echo done")]
    agent(PORTAL_AGENT_GIVE_UP_SECONDS="10")
    wait_for(lambda: b"ready" in portal.log)
    portal.refuse = 503
    time.sleep(1.5)
    portal.refuse = None
    wait_for(lambda: portal.exits)
    assert portal.exits[0]["exit_code"] == 0 and portal.exits[0]["stopped"] is False
    assert bytes(portal.log) == b"ready\ndone\n"


def test_systemd_stopping_the_agent_stops_the_job_gracefully_and_reports_it(portal, agent, workdir):
    portal.jobs = [spec(TRAP)]
    proc = agent()
    wait_for(lambda: b"ready" in portal.log)
    assert stopped(proc)[0] == 0
    assert portal.exits[0]["stopped"] is True and portal.exits[0]["exit_code"] == 0
    assert portal.log.endswith(b"saved\n") and not alive(portal.started[0]["pid"])


def test_an_agent_whose_portal_is_gone_stops_the_job_and_gives_up_in_time(portal, agent, workdir):
    portal.jobs = [spec(TRAP, grace_seconds=1)]
    proc = agent(PORTAL_AGENT_GIVE_UP_SECONDS="2")
    wait_for(lambda: b"ready" in portal.log)
    pid = portal.started[0]["pid"]
    portal.server.close()
    gone = time.monotonic()
    _, err = proc.communicate(timeout=15)
    # Its next post (within a second) finds it gone; then the give-up time, the grace, slack.
    assert time.monotonic() - gone < 1 + 2 + 1 + 3
    assert proc.returncode != 0
    assert "the portal has been unreachable for 2 s" in err.decode()
    assert not alive(pid)
    last = disk_log(workdir).splitlines()[-1]
    assert last.startswith(b"[portal-agent] the portal has been unreachable")
    assert b"saved" in disk_log(workdir)


def test_bytes_the_portal_lost_are_sent_again_and_the_log_arrives_whole(portal, agent, workdir):
    portal.lose_once = 100_000
    portal.jobs = [spec("seq 1 40000")]  # 229 KiB: four posts, one of them answered short
    agent()
    wait_for(lambda: portal.exits)
    assert bytes(portal.log) == disk_log(workdir) == subprocess.check_output(["seq", "1", "40000"])
    offsets = [post["offset"] for post in portal.posts("log")]
    assert 50_000 in offsets  # sent again from where the portal said it was


def test_a_capped_log_stops_sending_data_but_the_whole_log_stays_on_the_host(
    portal, agent, workdir
):
    portal.cap_at = 100
    portal.jobs = [spec("seq 1 1000; sleep 2.2; seq 1 1000")]  # posts at 1 s and 2 s
    agent()
    wait_for(lambda: portal.exits)
    assert bytes(portal.log) == disk_log(workdir)[:100]
    assert len(disk_log(workdir)) == 2 * len(subprocess.check_output(["seq", "1", "1000"]))
    posts = portal.posts("log")
    assert posts[0]["offset"] == 0 and len(base64.b64decode(posts[0]["data"])) > 100
    assert [post["data"] for post in posts[1:]] == [""] * (len(posts) - 1)
    assert {post["offset"] for post in posts[1:]} == {100}


def test_bytes_that_are_not_utf8_and_ansi_escapes_arrive_untouched(portal, agent, workdir):
    portal.jobs = [spec(r"printf '\377\376caf\303\251 \033[31mred\033[0m\r\n\000end'")]
    agent()
    wait_for(lambda: portal.exits)
    assert bytes(portal.log) == b"\xff\xfecaf\xc3\xa9 \x1b[31mred\x1b[0m\r\n\x00end"


def test_a_restarted_agent_adopts_the_live_run_instead_of_running_it_again(
    portal, agent, workdir, groups
):
    folder = workdir / JOB
    folder.mkdir(parents=True)
    job = spec(f"touch {folder}/ran-twice")
    (folder / "job.json").write_text(json.dumps(job | {"env": {}}))
    with open(folder / "run-1.log", "ab") as log:
        left = subprocess.Popen(
            ["sh", "-c", "echo before; sleep 3; echo after"],  # outlives the agent starting
            stdout=log,
            start_new_session=True,
        )
    groups.append(left.pid)
    (folder / "job.pid").write_text(f"{left.pid} {start_time(left.pid)} 1\n")
    portal.jobs = [job]
    agent()
    wait_for(lambda: portal.exits)
    left.wait()
    assert portal.started[0]["pid"] == left.pid
    assert bytes(portal.log) == b"before\nafter\n"
    assert portal.exits[0]["exit_code"] is None and portal.exits[0]["stopped"] is False
    wait_for(lambda: len(portal.exits) == 2)  # the portal asks for the run: its exit again
    assert portal.exits[1] == portal.exits[0] and not (folder / "ran-twice").exists()


def test_a_restarted_agent_sends_a_saved_exit_again_and_does_not_rerun(portal, agent, workdir):
    folder = workdir / JOB
    folder.mkdir(parents=True)
    saved = {"job": JOB, "run": 1, "exit_code": 0, "signal": None, "stopped": False}
    saved |= {"interrupted": False}
    (folder / "exit-1.json").write_text(json.dumps(saved | {"reported": False}))
    (folder / "run-1.log").write_bytes(b"done\n")
    (folder / "job.json").write_text(json.dumps(spec("true") | {"env": {}}))
    portal.jobs = [spec(f"touch {folder}/ran-twice")]
    agent()
    wait_for(lambda: len(portal.exits) == 2)  # on waking, then when the portal asks again
    assert portal.exits == [saved, saved]
    assert not (folder / "ran-twice").exists() and portal.started == []


def test_a_pid_taken_by_another_process_is_not_adopted(portal, agent, workdir):
    folder = workdir / JOB
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps(spec("true") | {"env": {}}))
    (folder / "run-1.log").write_bytes(b"before the reboot\n")
    # This test's own pid, with a start time it never had: a pid given out again after a reboot.
    (folder / "job.pid").write_text(f"{os.getpid()} 1 1\n")
    agent()
    wait_for(lambda: portal.exits)
    assert portal.exits[0]["exit_code"] is None and portal.started == []
    assert bytes(portal.log) == b"before the reboot\n"


def test_checkpoints_are_restored_from_s3_and_synced_back_while_and_after_it_runs(
    portal, agent, workdir, tmp_path
):
    calls = tmp_path / "aws-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$3" in s3://*) mkdir -p "$4/checkpoints"; touch "$4/checkpoints/restored.ckpt";;'
        " *) exit 2;; esac\n"
    )
    (bin_dir / "aws").chmod(0o755)
    uri = "s3://lab-checkpoints/vision-lab/0b0e/"
    portal.jobs = [
        spec(
            'ls "$CHECKPOINT_DIR"; sleep 1.2; echo trained',
            env={"PORTAL_CHECKPOINT_URI": uri},
        )
    ]
    agent(PORTAL_AGENT_SYNC_SECONDS="0.4")
    wait_for(lambda: portal.exits)
    folder = workdir / JOB
    restore, *back = calls.read_text().splitlines()
    # The checkpoints and the TensorBoard logs (which the portal serves from there), nothing
    # else; back up, each run's whole log too (past the portal's cap, the rest is only there).
    only = "--exclude * --include checkpoints/* --include tensorboard/*"
    assert restore == f"s3 sync {uri} {folder} {only}"
    assert len(back) >= 2
    assert set(back) == {f"s3 sync {folder} {uri} {only} --include run-*.log"}
    log = bytes(portal.log).decode()
    assert log.startswith("restored.ckpt\n") and "trained\n" in log
    failed = f"[portal-agent] checkpoint sync {folder} -> {uri} failed (exit 2)\n"
    assert log.endswith(failed) and portal.exits[0]["exit_code"] == 0


def test_the_agent_is_written_for_the_hosts_python_3_8():
    import ast

    source = AGENT.read_text()
    ast.parse(source, feature_version=(3, 8))
    assert len(source.splitlines()) < 520


def test_the_working_folder_is_unpacked_where_the_command_starts(portal, agent, workdir):
    from tests.instances.test_jobs import b64_tar

    files = {"data/labels.txt": b"cat\n", "train.sh": b"echo trained\n"}
    portal.jobs = [spec("cat data/labels.txt; sh train.sh", workdir={"tarball": b64_tar(files)})]
    agent()
    wait_for(lambda: portal.exits)
    assert bytes(portal.log) == b"cat\ntrained\n" and portal.exits[0]["exit_code"] == 0
    saved = json.loads((workdir / JOB / "job.json").read_text())
    assert saved["workdir"] == 0  # the archive is unpacked, not kept twice


def test_a_git_working_folder_is_cloned_once_per_host(portal, agent, workdir, tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "train.sh").write_text("echo from git\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    gone = {"git": str(tmp_path / "gone"), "ref": ""}
    portal.jobs = [
        spec("sh train.sh", workdir={"git": str(repo), "ref": "main"}),
        # The next run on this host finds the folder in place: nothing is fetched again.
        spec("sh train.sh; echo run 2", run=2, workdir=gone),
    ]
    agent()
    wait_for(lambda: len(portal.exits) == 2)
    assert (workdir / JOB / "run-1.log").read_bytes() == b"from git\n"
    assert (workdir / JOB / "run-2.log").read_bytes() == b"from git\nrun 2\n"
    assert [exit["exit_code"] for exit in portal.exits] == [0, 0]


def test_a_working_folder_that_cannot_be_fetched_fails_the_run_with_125_and_says_why(
    portal, agent, workdir, tmp_path
):
    portal.jobs = [spec("echo never", workdir={"git": str(tmp_path / "no-such-repo"), "ref": ""})]
    agent()
    wait_for(lambda: portal.exits)
    log = bytes(portal.log).decode()
    assert "never" not in log and portal.exits[0]["exit_code"] == 125
    assert "[portal-agent] the working folder could not be fetched: git fetch" in log
