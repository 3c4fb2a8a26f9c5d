"""Managed jobs, portal side: submit (with every bad input refused), the agent's hand-out,
start, output and exit as a host's agent sends them, recoveries after an interruption or a
lost host, restarts, cancel, re-run, who may do what, and the job pass."""

from __future__ import annotations

import base64
import io
import tarfile
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from instances import services, tasks
from instances.models import Instance, Job, JobRun, Order
from instances.providers.simulated import SimulatedProvider
from instances.services.jobs import jobs_pass
from instances.services.telemetry import agent_secret
from portal.models import Notice

J = Job.Status
H = Instance.Status
GIT = "https://git.example.org/lab/project.git"


def tar(files: dict[str, bytes | str], *, gz: bool = True) -> bytes:
    """A tar archive of ``files`` (name: content, or a str: a symbolic link to it), as a
    researcher would upload one."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def b64_tar(files: dict[str, bytes | str], *, gz: bool = True) -> str:
    return base64.b64encode(tar(files, gz=gz)).decode()


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = 120


@pytest.fixture
def job_body():
    def body(**overrides):
        data = {
            "project": "vision-lab",
            "name": "resnet",
            "instance_type": "g5.xlarge",
            "image": "tf-2.17-cuda12.3",
            "market": "spot",
            "command": "python train.py --epochs 10",
            "env": {"BATCH": "64"},
            "time_limit_minutes": 120,
        }
        data.update(overrides)
        return {key: value for key, value in data.items() if value is not None}

    return body


@pytest.fixture
def submit(api_as, alice, catalog, job_body):
    def post(user=None, **overrides):
        answer = api_as(user or alice).post("/api/v1/jobs/", job_body(**overrides), format="json")
        assert answer.status_code == 201, answer.json()
        return Job.objects.get(pk=answer.json()["id"])

    return post


def boot(job: Job) -> Instance:
    """Launch the job's newest requested host on the simulated cloud: it runs."""
    host = job.order.instances.filter(status=H.REQUESTED).order_by("-created_at").first()
    return services.instance_provision(instance_id=host.pk)


class Agent:
    """A host's agent, speaking the protocol instances/agent/portal_agent.py speaks."""

    def __init__(self, host: Instance):
        self.host = host
        self.api = APIClient()
        secret = agent_secret(host)
        self.api.credentials(HTTP_AUTHORIZATION=f"Agent {secret}")
        self.base = f"/api/v1/instances/{host.pk}/job/"
        self.offset = 0

    def ask(self):
        return self.api.get(self.base)

    def post(self, step, **body):
        return self.api.post(f"{self.base}{step}/", body, format="json")

    def run(self, assignment, output: bytes = b"", exit_code=0, **exit_fields):
        ref = {"job": assignment["job"], "run": assignment["run"]}
        assert self.post("started", **ref, pid=4242).status_code == 200
        if output:
            sent = self.post("log", **ref, offset=0, data=base64.b64encode(output).decode()).json()
            assert sent["offset"] == len(output)
        return self.post("exit", **ref, exit_code=exit_code, **exit_fields)


def test_a_job_submitted_waits_for_its_host_then_runs_logs_and_succeeds(submit, alice, clock):
    job = submit()
    assert job.status == J.PENDING
    assert job.order.count == 1 and job.order.market == "spot"
    assert job.order.interruption_policy == "relaunch_spot"
    assert "waiting for its host" in job.status_reason
    host = boot(job)
    agent = Agent(host)
    assignment = agent.ask().json()
    assert assignment["command"] == "python train.py --epochs 10"
    env = assignment["env"]
    assert env["BATCH"] == "64" and env["JOB_ID"] == str(job.pk) and env["JOB_RECOVERY"] == "0"
    job.refresh_from_db()
    base = job.order.checkpoint_uri.removeprefix("file://")
    # Side by side: BackupAndRestore deletes its own folder when training ends.
    assert env["CHECKPOINT_DIR"] == f"{base}checkpoints/"
    assert env["TENSORBOARD_LOG_DIR"] == f"{base}tensorboard/"
    job.refresh_from_db()
    assert job.status == J.STARTING and job.host == host
    # Asking again (an agent that restarted) gets the same run, not a second one.
    assert agent.ask().json()["run"] == assignment["run"] == 1
    answer = agent.run(assignment, output=b"epoch 1\nepoch 2\n")
    assert answer.json()["status"] == "succeeded"
    job.refresh_from_db()
    assert job.status == J.SUCCEEDED and job.exit_code == 0 and job.ended_at is not None
    logs = APIClient()
    logs.force_authenticate(alice)
    body = logs.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert body["text"].startswith("=== run 1 on host ")
    assert body["text"].endswith("epoch 1\nepoch 2\n")
    assert body["ended"] is True and body["next_offset"] == body["size"]
    # The job's host ends with it, and its owner hears.
    host.refresh_from_db()
    assert host.status == H.TERMINATING
    assert Notice.objects.filter(user=alice, subject="Job resnet succeeded").exists()


def test_a_spot_interruption_recovers_the_job_on_a_replacement_with_the_same_checkpoints(
    submit, alice
):
    job = submit()
    first = boot(job)
    agent = Agent(first)
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=100)
    SimulatedProvider().warn(first.cloud_id)
    services.spot_events_drain()
    # The agent hears "stop" in its next answer, stops the command, reports.
    chunk = agent.post("log", **ref, offset=0, data=base64.b64encode(b"epoch 3 saved\n").decode())
    assert chunk.json()["stop"] is True
    agent.post("exit", **ref, exit_code=None, signal="SIGTERM", stopped=True)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert "taking back spot host" in job.status_reason
    replacement = first.replacements.get()
    assert replacement.market == "spot"
    # The warned host is not handed the job again; the replacement is.
    assert agent.ask().status_code == 204
    second = services.instance_provision(instance_id=replacement.pk)
    again = Agent(second).ask().json()
    assert again["run"] == 2 and again["env"]["JOB_RECOVERY"] == "1"
    assert again["env"]["CHECKPOINT_DIR"] == assignment["env"]["CHECKPOINT_DIR"]
    Agent(second).run(again, output=b"resumed at epoch 4\n")
    job.refresh_from_db()
    assert job.status == J.SUCCEEDED and job.recoveries == 1
    assert [run.outcome for run in job.runs.all()] == ["interrupted", "succeeded"]
    assert Notice.objects.filter(user=alice, subject="Job resnet is recovering").count() == 1
    assert Notice.objects.get(subject="Job resnet is recovering").closed_at is not None


def test_a_run_that_fails_fails_the_job_unless_it_may_restart(submit):
    job = submit(max_restarts=1, retry_exit_codes=[75])
    agent = Agent(boot(job))
    agent.run(agent.ask().json(), exit_code=3)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.restarts == 1
    # It restarts on the same host; a retried exit code does not use a restart.
    agent.run(agent.ask().json(), exit_code=75)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.restarts == 1
    agent.run(agent.ask().json(), exit_code=3)
    job.refresh_from_db()
    assert job.status == J.FAILED and job.exit_code == 3
    assert "failed with exit code 3" in job.status_reason
    assert job.runs.count() == 3 and job.recoveries == 0
    # The restarts on its own host are on its timeline; the owner hears once, of the failure
    # (each restart sent an email saying it "restarts on another host").
    told = Notice.objects.filter(user=job.owner).values_list("subject", flat=True)
    assert list(told) == [f"Job {job.name} failed"]


def test_a_failed_job_keeps_its_host_when_asked_then_lets_it_go(submit, clock):
    job = submit(keep_host_minutes=30)
    host = boot(job)
    agent = Agent(host)
    agent.run(agent.ask().json(), exit_code=1)
    job.refresh_from_db()
    host.refresh_from_db()
    assert job.status == J.FAILED and host.status == H.RUNNING
    assert job.keep_host_until == clock.now + timedelta(minutes=30)
    clock.shift(timedelta(minutes=31))
    assert jobs_pass()["released"] == 1
    host.refresh_from_db()
    assert host.status == H.TERMINATING


def test_a_host_kept_after_its_job_failed_outlives_its_lease_until_the_time_shown(
    submit, clock, alice
):
    """The lease (the time limit in whole hours from the host's first run) ended a failed
    job's kept host long before "kept until": the host stays until then, unwarned."""
    job = submit(time_limit_minutes=60, keep_host_minutes=120)
    host = boot(job)
    agent = Agent(host)
    agent.run(agent.ask().json(), exit_code=1)
    job.refresh_from_db()
    assert job.status == J.FAILED and job.keep_host_until == clock.now + timedelta(hours=2)
    clock.shift(timedelta(minutes=50))
    assert services.leases_warn() == []
    clock.shift(timedelta(minutes=20))  # the lease ended 10 minutes ago
    assert services.leases_expire() == []
    assert Instance.objects.get(pk=host.pk).status == H.RUNNING
    clock.shift(timedelta(minutes=51))
    assert jobs_pass()["released"] == 1
    assert Instance.objects.get(pk=host.pk).status == H.TERMINATING


def test_a_lost_host_is_a_recovery_the_job_pass_starts(submit):
    job = submit(market="on_demand")
    host = boot(job)
    agent = Agent(host)
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    SimulatedProvider().kill(host.cloud_id)
    services.instance_sync(instance_id=host.pk)
    host.refresh_from_db()
    assert not host.is_live
    # The run ended with its host; the job waits for the pass to recover it.
    assert job.runs.get().outcome == JobRun.Outcome.LOST and job.runs.get().ended_at
    assert jobs_pass()["host_lost"] == 1
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert job.runs.get().outcome == JobRun.Outcome.LOST
    replacement = host.replacements.get()
    assert replacement.market == "on_demand"
    # A second pass changes nothing: one recovery, one replacement.
    assert not any(jobs_pass().values())
    assert host.replacements.count() == 1


def test_the_job_pass_reads_live_jobs_in_a_fixed_number_of_queries(submit):
    """Nothing to repair: the pass costs the same for 2 live jobs as for 8 (it once locked and
    read each one: 302 queries for 100 jobs, 3,002 for 1,000)."""

    def cost() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert not any(jobs_pass().values())
        return len(captured.captured_queries)

    for _ in range(2):
        Agent(boot(submit())).ask()  # one running, one handed its run
    submit()  # one waiting for its host
    few = cost()
    for _ in range(5):
        submit()
    assert cost() == few


def test_recoveries_stop_at_the_jobs_limit(submit):
    job = submit(max_recoveries=0)
    host = boot(job)
    agent = Agent(host)
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    SimulatedProvider().warn(host.cloud_id)
    services.spot_events_drain()
    agent.post("exit", job=assignment["job"], run=1, exit_code=None, stopped=True)
    job.refresh_from_db()
    assert job.status == J.FAILED and "0 recoveries are used up" in job.status_reason


def test_cancel_ends_the_host_and_tells_the_agent_to_stop(submit, api_as, alice, bob, carol, fin):
    job = submit()
    host = boot(job)
    agent = Agent(host)
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    assert api_as(fin).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 403
    # bob shares the project: he sees the job but may not cancel it; carol does not see it.
    assert api_as(bob).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 403
    assert api_as(carol).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    answer = api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    host.refresh_from_db()
    assert host.status == H.TERMINATING
    chunk = agent.post("log", job=assignment["job"], run=1, offset=0, data="")
    assert chunk.json()["stop"] is True
    agent.post("exit", job=assignment["job"], run=1, exit_code=None, stopped=True)
    job.refresh_from_db()
    assert job.status == J.CANCELLED and job.runs.get().outcome == "stopped"
    again = api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "invalid_state"


def test_a_cancelled_jobs_host_gone_before_its_agent_reports_ends_the_run(submit, api_as, alice):
    job = submit()
    host = boot(job)
    agent = Agent(host)
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    assert api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    # The host terminates before the agent got to report the command's exit.
    tasks.terminate_instance.apply(args=(str(host.pk),))
    host.refresh_from_db()
    assert host.status == H.TERMINATED
    run = job.runs.get()
    assert run.outcome == JobRun.Outcome.STOPPED and run.ended_at is not None
    # The agent's credential went with the host: its late report changes nothing.
    late = agent.post("exit", job=assignment["job"], run=1, exit_code=143, stopped=True)
    assert late.status_code == 401
    assert job.runs.get().outcome == JobRun.Outcome.STOPPED


def test_rerun_copies_the_settings_of_an_ended_job(submit, api_as, alice):
    job = submit(max_restarts=2, env={"SEED": "7"})
    assert api_as(alice).post(f"/api/v1/jobs/{job.pk}/rerun/").status_code == 409
    api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    answer = api_as(alice).post(f"/api/v1/jobs/{job.pk}/rerun/")
    assert answer.status_code == 201
    new = Job.objects.get(pk=answer.json()["id"])
    assert new.rerun_of == job and new.env == {"SEED": "7"} and new.max_restarts == 2
    assert new.order != job.order and new.status == J.PENDING


def test_a_job_held_for_approval_says_so_and_fails_when_rejected(submit, projects, ada, api_as):
    from instances.models import ApprovalPolicy

    ApprovalPolicy.objects.create(project=projects["vision-lab"], instance_types=["g5.xlarge"])
    job = submit()
    assert job.order.status == Order.Status.PENDING_APPROVAL
    assert job.status_reason.startswith("waiting for approval: g5.xlarge needs approval")
    approved = submit(name="approved")
    api_as(ada).post(f"/api/v1/orders/{approved.order.pk}/approve/")
    shown = api_as(ada).get(f"/api/v1/jobs/{approved.pk}/").json()
    assert (shown["status"], shown["status_reason"]) == (
        "pending",
        "approved by ada; waiting for its host to launch",
    )
    api_as(ada).post(f"/api/v1/orders/{job.order.pk}/reject/", {"reason": "use A10s"})
    assert jobs_pass()["order_ended"] == 1
    job.refresh_from_db()
    assert job.status == J.FAILED and "rejected: use A10s" in job.status_reason


def test_the_time_limit_fails_a_running_job(submit, clock):
    job = submit(time_limit_minutes=30)
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    clock.shift(timedelta(minutes=29))
    assert not jobs_pass()["time_limit"]
    clock.shift(timedelta(minutes=2))
    assert jobs_pass()["time_limit"] == 1
    job.refresh_from_db()
    assert job.status == J.FAILED and "time limit of 30 minutes" in job.status_reason


def test_the_lease_leaves_a_running_jobs_host_to_the_time_limit(submit, clock, alice):
    """The lease (the limit in whole hours from the host's first run) ended the host of a job
    handed its run two minutes after boot, a minute before the limit: the job recovered on a new
    host, only for the limit to fail it. The limit ends it, and its host with it; the lease's
    warning speaks of the job's limit."""
    job = submit(time_limit_minutes=60)
    host = boot(job)
    assert host.lease_expires_at == clock.now + timedelta(hours=1)
    clock.shift(timedelta(minutes=2))
    agent = Agent(host)
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=7)
    clock.shift(timedelta(minutes=44))
    assert services.leases_warn() == [(str(host.pk), 15)]
    notice = Notice.objects.get(user=alice, subject__startswith="Job resnet")
    assert notice.subject == "Job resnet reaches its time limit in 16 minutes"
    assert "reaches its 60-minute time limit at" in notice.body and notice.link.endswith(
        f"/jobs/{job.pk}/"
    )
    clock.shift(timedelta(minutes=15))  # the lease ended a minute ago
    assert services.leases_expire() == []
    assert not jobs_pass()["host_lost"]
    clock.shift(timedelta(minutes=2))
    assert jobs_pass()["time_limit"] == 1
    job.refresh_from_db()
    assert job.status == J.FAILED and job.recoveries == 0
    assert "time limit of 60 minutes" in job.status_reason
    assert Instance.objects.get(pk=host.pk).status == H.TERMINATING
    assert job.order.instances.count() == 1


def test_the_agent_may_only_speak_for_its_own_host_and_run(submit):
    job = submit()
    host = boot(job)
    other = boot(submit(name="other"))
    assignment = Agent(host).ask().json()
    stranger = Agent(other)
    stranger.base = f"/api/v1/instances/{host.pk}/job/"
    assert stranger.ask().status_code == 403
    wrong_run = Agent(host).post("started", job=assignment["job"], run=9, pid=1)
    assert wrong_run.status_code == 409 and wrong_run.json()["code"] == "not_this_run"
    assert APIClient().get(f"/api/v1/instances/{host.pk}/job/").status_code == 401


def test_output_is_kept_exactly_resent_stretches_once_and_capped(submit, settings, alice, api_as):
    settings.PORTAL_JOB_LOG_CAP_BYTES = 200
    job = submit()
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=1)
    raw = b"\x1b[31mred\x1b[0m \xff\xfe not utf-8\n"

    def send(offset, data):
        return agent.post("log", **ref, offset=offset, data=base64.b64encode(data).decode()).json()

    assert send(0, raw)["offset"] == len(raw)
    # A resent stretch that overlaps what the portal has: only its new part is kept.
    assert send(10, raw[10:] + b"more\n")["offset"] == len(raw) + 5
    # A stretch from beyond what it has: the agent hears where to resend from.
    assert send(len(raw) + 100, b"gap")["offset"] == len(raw) + 5
    capped = send(len(raw) + 5, b"x" * 300)
    assert capped["capped"] is True
    job.refresh_from_db()
    assert job.log_bytes == 200 and job.log_capped
    text = api_as(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()["text"]
    assert "\x1b[31mred" in text and "\ufffd" in text and "more\n" in text
    tail = api_as(alice).get(f"/api/v1/jobs/{job.pk}/logs/?offset=190").json()
    assert tail["offset"] == 190 and tail["next_offset"] == 200


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"command": ""}, "command"),
        ({"command": "   "}, "command"),
        ({"command": "x" * (100 * 1024)}, "command"),
        ({"command": "echo \x00"}, "command"),
        ({"image": "no-such-image"}, "image"),
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"time_limit_minutes": 10 * 365 * 24 * 60}, "time_limit_minutes"),
        ({"retry_exit_codes": list(range(1, 256)) * 40}, "retry_exit_codes"),
        ({"retry_exit_codes": [0]}, "retry_exit_codes.0"),
        ({"env": {"JOB_ID": "mine"}}, "env"),
        ({"env": {"bad name": "x"}}, "env"),
        ({"env": {"A": "\x00"}}, "env"),
        ({"market": "cheap"}, "market"),
        ({"stop_signal": "SIGKILL"}, "stop_signal"),
        ({"name": ""}, "name"),
        ({"instance_type": "p9.huge"}, "instance_type"),
        ({"project": "nlp-lab"}, "project"),
        ({"colour": "blue"}, "colour"),
        ({"workdir_tarball": "not base64!"}, "workdir_tarball"),
        ({"workdir_tarball": base64.b64encode(b"plain text, no tar").decode()}, "workdir_tarball"),
        ({"workdir_tarball": b64_tar({"../escape.sh": b"x"})}, "workdir_tarball"),
        ({"workdir_tarball": b64_tar({"passwd": "/etc/passwd"})}, "workdir_tarball"),
        ({"workdir_tarball": b64_tar({"big.bin": bytes(600 * 1024)}, gz=False)}, "workdir_tarball"),
        ({"workdir_tarball": b64_tar({"a": b"x"}), "workdir_git": GIT}, "workdir_git"),
        ({"workdir_git": "http://example.org/lab/p.git"}, "workdir_git"),
        ({"workdir_git": "https://user:token@example.org/lab/p.git"}, "workdir_git"),
        ({"workdir_git": "--upload-pack=sh"}, "workdir_git"),
        ({"workdir_git": GIT, "workdir_ref": "--output=/etc/x"}, "workdir_ref"),
        ({"workdir_ref": "main"}, "workdir_ref"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(
    api_as, alice, catalog, job_body, overrides, field
):
    answer = api_as(alice).post("/api/v1/jobs/", job_body(**overrides), format="json")
    assert answer.status_code == 400, answer.content[:300]
    body = answer.json()
    assert any(name.split(".")[0] == field.split(".")[0] for name in body["fields"]), body
    assert body["detail"]
    assert not Job.objects.exists() and not Order.objects.exists()


def test_a_command_over_the_body_limit_is_refused_before_anything_is_read(
    api_as, alice, catalog, job_body
):
    answer = api_as(alice).post(
        "/api/v1/jobs/", job_body(command="x" * (1024 * 1024)), format="json"
    )
    assert answer.status_code == 413 and answer.json()["code"] == "body_too_large"
    assert not Job.objects.exists()


def test_finance_reads_jobs_but_cannot_submit_and_strangers_get_404(
    submit, api_as, fin, carol, job_body
):
    job = submit()
    assert api_as(fin).get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert api_as(fin).post("/api/v1/jobs/", job_body(), format="json").status_code == 403
    assert api_as(carol).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert api_as(carol).get(f"/api/v1/jobs/{job.pk}/logs/").status_code == 404
    assert str(job.pk) not in str(api_as(carol).get("/api/v1/jobs/").json())


def test_every_job_call_is_audited(submit, api_as, alice):
    job = submit()
    api_as(alice).get(f"/api/v1/jobs/{job.pk}/")
    host = boot(job)
    Agent(host).ask()
    refs = set(AuditEvent.objects.values_list("object_ref", flat=True))
    assert f"job:{job.pk}" in refs and f"instance:{host.pk}" in refs


def test_the_job_detail_sums_its_hosts_costs(submit, api_as, alice, clock):
    job = submit()
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    agent.post("started", job=assignment["job"], run=1, pid=1)
    clock.shift(timedelta(hours=2))
    body = api_as(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert len(body["hosts"]) == 1
    assert body["cost"] == body["hosts"][0]["cost_so_far"]
    assert Decimal(body["cost"]) > 0
    assert body["runs"][0]["number"] == 1 and body["status"] == "running"


def taken_back_unreplaced(host: Instance, monkeypatch) -> Instance:
    """The cloud takes ``host`` back and reconcile records it, its worker dying before the
    spot recovery could start the replacement."""
    from instances.services import spot_recovery

    SimulatedProvider().interrupt(host.cloud_id)
    with monkeypatch.context() as patch:
        patch.setattr(spot_recovery, "replacement_start", lambda **kwargs: None)
        services.instance_sync(instance_id=host.pk)
    host.refresh_from_db()
    return host


def test_a_pending_jobs_host_taken_back_unreplaced_gets_its_replacement_from_the_pass(
    submit, monkeypatch
):
    """A worker killed between recording the interruption and starting the replacement (found
    by the job chaos test's reading): the job pass starts it, and the job waits for it."""
    job = submit()
    host = taken_back_unreplaced(boot(job), monkeypatch)
    assert host.status == H.TERMINATED and host.replaced_by is None
    assert jobs_pass()["host_lost"] == 1
    job.refresh_from_db()
    replacement = host.replacements.get()
    assert job.status == J.PENDING and job.recoveries == 0
    assert job.events.filter(reason=f"waits for host {replacement.name}").exists()
    assert not any(jobs_pass().values())  # once
    assert host.replacements.count() == 1


def test_a_pass_that_read_the_hosts_before_reconcile_replaced_one_lets_the_job_wait(
    submit, monkeypatch
):
    """The job chaos test's failure in CI: the pass read a pending job's hosts (its one host
    taken back), then reconcile, recording the interruption, committed the replacement before
    the pass looked for one; the pass failed the job ("no host could run it") though its
    replacement was launching. The pass reads the hosts again under the host's lock."""
    from instances.services import spot_recovery
    from instances.services.jobs import recovery

    job = submit()
    host = taken_back_unreplaced(boot(job), monkeypatch)
    read_by_the_pass = list(job.order.instances.all())
    replacement = spot_recovery.replacement_start(instance_id=host.pk, why="interrupted")
    with transaction.atomic():
        locked = Job.objects.select_for_update().select_related("order").get(pk=job.pk)
        recovery._repair(locked, timezone.now(), "no_live_host", read_by_the_pass)
    job.refresh_from_db()
    assert job.status == J.PENDING, job.status_reason
    assert list(host.replacements.all()) == [replacement]
    assert not any(jobs_pass().values())


def test_a_working_folder_goes_to_the_agent_with_the_run_and_to_a_rerun(submit, api_as, alice):
    archive = tar({"train.py": b"print('hi')\n", "data/labels.txt": b"cat\n"})
    job = submit(workdir_tarball=base64.b64encode(archive).decode(), command="python3 train.py")
    detail = api_as(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["workdir_tarball"]["size"] == len(archive) and detail["workdir_git"] == ""
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    assert base64.b64decode(assignment["workdir"]["tarball"]) == archive
    agent.run(assignment, exit_code=0)
    rerun = api_as(alice).post(f"/api/v1/jobs/{job.pk}/rerun/").json()
    assert rerun["workdir_tarball"] == detail["workdir_tarball"]
    # A repository instead: the agent is told where and which ref.
    other = submit(name="from-git", workdir_git=GIT, workdir_ref="v1.2")
    assignment = Agent(boot(other)).ask().json()
    assert assignment["workdir"] == {"git": GIT, "ref": "v1.2"}
    assert api_as(alice).get(f"/api/v1/jobs/{other.pk}/").json()["workdir_tarball"] is None


def test_a_spot_job_at_its_quota_limit_recovers_once_the_warned_host_is_gone(
    submit, alice, ada, projects, clock
):
    """The warned host still counts against the quota, so its replacement was refused at the
    warning and the job failed at once, though the owner was just told it would restart."""
    services.quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    job = submit()
    first = boot(job)
    agent = Agent(first)
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=100)
    SimulatedProvider().warn(first.cloud_id)
    services.spot_events_drain()
    agent.post("exit", **ref, exit_code=None, signal="SIGTERM", stopped=True)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert not first.replacements.exists()
    waiting = job.events.order_by("-at", "-id").first()
    assert "no replacement host yet (Quota exceeded" in waiting.reason
    assert f"tried again once {first.name} is gone" in waiting.reason
    clock.shift(timedelta(seconds=121))  # the cloud takes it
    services.reconcile()
    jobs_pass()
    job.refresh_from_db()
    assert job.status == J.RECOVERING
    second = services.instance_provision(instance_id=first.replacements.get().pk)
    assert Agent(second).ask().json()["run"] == 2


def test_a_jobs_recoveries_are_not_capped_by_the_orders_replacement_limit(submit, settings):
    """PORTAL_SPOT_MAX_REPLACEMENTS (3) failed a job at its 4th replacement though the form
    says "no limit within the time limit": a job's own max_recoveries bounds it."""
    settings.PORTAL_SPOT_MAX_REPLACEMENTS = 1
    job = submit()
    host = boot(job)
    for number in (1, 2):
        agent = Agent(host)
        assignment = agent.ask().json()
        assert assignment["run"] == number
        ref = {"job": assignment["job"], "run": number}
        agent.post("started", **ref, pid=100)
        SimulatedProvider().warn(host.cloud_id)
        services.spot_events_drain()
        agent.post("exit", **ref, exit_code=None, stopped=True)
        job.refresh_from_db()
        assert job.status == J.RECOVERING, job.status_reason
        host = services.instance_provision(instance_id=host.replacements.get().pk)
    assert job.recoveries == 2


def test_replacements_that_never_run_stop_at_the_cap_for_a_job_too(submit, settings):
    """Job orders are exempt from the replacement cap for hosts that ran; a replacement that
    fails to launch again and again would otherwise be replaced every job pass until the
    time limit."""
    settings.PORTAL_SPOT_MAX_REPLACEMENTS = 1
    job = submit(market="on_demand")
    host = boot(job)
    Agent(host).ask()
    SimulatedProvider().kill(host.cloud_id)
    services.instance_sync(instance_id=host.pk)
    assert jobs_pass()["host_lost"] == 1
    replacement = host.replacements.get()
    services.instance_fail(instance_id=replacement.pk, reason="the image is gone")
    jobs_pass()
    job.refresh_from_db()
    assert job.status == J.FAILED and "PORTAL_SPOT_MAX_REPLACEMENTS" in job.status_reason
    assert Instance.objects.filter(order=job.order).count() == 2


def test_stopping_a_failed_jobs_kept_host_does_not_say_the_lease_ends_it(submit, clock):
    """The lease does not end a host kept for its failed job (the job pass does, at the time
    its page shows), yet Stop's confirmation said "Its lease still ends at ..."."""
    job = submit(market="on_demand", time_limit_minutes=60, keep_host_minutes=120)
    host = boot(job)
    agent = Agent(host)
    agent.run(agent.ask().json(), exit_code=1)
    host = Instance.objects.with_detail().select_related("pool").get(pk=host.pk)
    stop = {action.name: action for action in host.actions_now}["stop"]
    assert "lease" not in stop.confirm_for(host)
