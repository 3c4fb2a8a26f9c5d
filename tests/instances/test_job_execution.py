"""A managed job really runs: the simulated cloud starts each job host's agent as a process on
this machine (instances/providers/simulated_agents.py), the agent asks the portal (a live
server) for the run, runs the command, streams its output and reports its exit. An
interruption warning stops the command with its signal so it saves its checkpoint, and the run
after it, on the replacement host, resumes from that checkpoint."""

from __future__ import annotations

import pytest

from instances import services
from instances.models import Instance, Job
from instances.providers.simulated import SimulatedProvider
from instances.providers.simulated_agents import host_agents
from instances.selectors.jobs import job_log_read
from instances.services.jobs import job_submit
from tests.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# A training loop as a shell script: one "epoch" every 0.3 s, the epoch reached kept in
# $CHECKPOINT_DIR, resumed from there; SIGTERM saves and exits 143 (as Keras'
# BackupAndRestore does at the end of an epoch).
TRAIN = r"""
mkdir -p "$CHECKPOINT_DIR"
epoch=$(cat "$CHECKPOINT_DIR/epoch" 2>/dev/null || echo 0)
echo "recovery $JOB_RECOVERY: resuming at epoch $((epoch + 1))"
trap 'echo "saved at epoch $epoch"; echo $epoch > "$CHECKPOINT_DIR/epoch"; exit 143' TERM
while [ "$epoch" -lt "$EPOCHS" ]; do
  sleep 0.3 & wait $!
  epoch=$((epoch + 1))
  echo "$epoch" > "$CHECKPOINT_DIR/epoch"
  echo "epoch $epoch done"
done
echo "trained $EPOCHS epochs"
"""


@pytest.fixture
def agents(settings, live_server, tmp_path):
    settings.PORTAL_SIMULATED_AGENTS = True
    settings.PORTAL_AGENT_URL = live_server.url
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = 120
    settings.VAR_DIR = tmp_path / "var"
    started: list[Instance] = []
    yield started
    for host in Instance.objects.all():
        host_agents().end(host.pk, grace=2.0)
    for host in Instance.objects.all():
        assert host_agents().pid(host.pk) is None and not host_agents().job_pids(host.pk)


def log_of(job: Job) -> str:
    job.refresh_from_db()
    return job_log_read(job, limit=1024 * 1024).text


def boot(job: Job) -> Instance:
    host = job.order.instances.filter(status=Instance.Status.REQUESTED).latest("created_at")
    return services.instance_provision(instance_id=host.pk)


def submit(alice, projects, catalog, **fields) -> Job:
    from instances.models import Image

    return job_submit(
        requester=alice,
        project=projects["vision-lab"],
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        name="train",
        time_limit_minutes=30,
        grace_seconds=5,
        **fields,
    )


def test_an_interrupted_job_resumes_from_its_checkpoint_on_the_replacement(
    agents, alice, projects, catalog
):
    job = submit(alice, projects, catalog, market="spot", command=TRAIN, env={"EPOCHS": "8"})
    first = boot(job)
    wait_for(lambda: "epoch 3 done" in log_of(job), what="epoch 3")
    job.refresh_from_db()
    assert job.status == Job.Status.RUNNING and job.host == first
    SimulatedProvider().warn(first.cloud_id)
    services.spot_events_drain()
    # The agent hears "stop" in its next answer: the job saves and the run ends.
    wait_for(lambda: Job.objects.get(pk=job.pk).status == Job.Status.RECOVERING, what="recovering")
    assert "saved at epoch" in log_of(job)
    saved = int(log_of(job).rsplit("saved at epoch ", 1)[1].split()[0])
    second = boot(job)
    assert second.replaces == first and second.availability_zone != first.availability_zone
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Job.Status.SUCCEEDED,
        timeout=45,
        what="success",
    )
    text = log_of(job)
    run_two = text.split("=== run 2 on host ", 1)[1]
    assert f"recovery 1: resuming at epoch {saved + 1}" in run_two
    assert "epoch 1 done" not in run_two and "trained 8 epochs" in run_two
    job.refresh_from_db()
    assert job.recoveries == 1 and job.exit_code == 0
    assert [run.outcome for run in job.runs.all()] == ["interrupted", "succeeded"]
    # The warned host's agent ran nothing more.
    assert host_agents().job_pids(first.pk) == []


def test_a_failing_command_fails_the_job_with_its_exit_code_and_keeps_its_log(
    agents, alice, projects, catalog
):
    job = submit(
        alice, projects, catalog, market="on_demand", command="echo 'loss is nan' >&2; exit 3"
    )
    boot(job)
    wait_for(lambda: Job.objects.get(pk=job.pk).is_ended, what="the job to end")
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.exit_code == 3
    assert "loss is nan" in log_of(job)


def test_cancel_stops_the_command_and_its_host_takes_the_agent_with_it(
    agents, alice, projects, catalog
):
    job = submit(alice, projects, catalog, market="on_demand", command="sleep 600")
    host = boot(job)
    wait_for(lambda: host_agents().job_pids(host.pk), what="the job process")
    services_job = Job.objects.get(pk=job.pk)
    from instances.services.jobs import job_cancel

    job_cancel(job=services_job, user=alice)
    services.instance_cloud_action(instance_id=host.pk, action="terminate")
    wait_for(lambda: not host_agents().job_pids(host.pk), timeout=15, what="the job to stop")
    assert host_agents().pid(host.pk) is None


def test_a_jobs_uploaded_working_folder_is_where_its_command_runs(agents, alice, projects, catalog):
    from tests.instances.test_jobs import tar

    folder = tar(
        {
            "train.sh": b'echo "training in $(basename $(pwd))"; cat config/lr\n',
            "config/lr": b"0.001\n",
        }
    )
    job = submit(
        alice, projects, catalog, market="on_demand", command="sh train.sh", workdir=folder
    )
    boot(job)
    wait_for(lambda: Job.objects.get(pk=job.pk).is_ended, what="the end of the job")
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, log_of(job)
    assert f"training in {job.pk}\n0.001\n" in log_of(job)
