"""The real gpu program against a live test server (no mock of the API): signing in, the
catalog as JSON, an order waited on until a real Celery worker has its hosts running, ssh and
ssh-config, a refusal's exit code and sentence, a revoked or expired token, the API version
warning, costs, and a job's output followed to its end."""

from __future__ import annotations

import json
import stat
from datetime import timedelta

import pytest
from django.utils import timezone

from instances import services
from instances.models import Instance, Job, Order
from instances.providers.simulated_agents import host_agents
from instances.services.approvals import approval_policy_set
from instances.services.quotas import quota_set
from portal.models import ApiToken
from portal.services import token_revoke
from tests.cli.conftest import Gpu
from tests.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

IMAGE = "tf-2.17-cuda12.3"


def test_login_keeps_the_token_in_a_600_file_and_never_prints_it(gpu, live_server, alice, token_of):
    token = token_of(alice, name="laptop")
    result = gpu("login", live_server.url, "--stdin", stdin=token + "\n")
    assert result.returncode == 0, result.stderr
    assert f"Signed in to {live_server.url} with laptop (" in result.stderr
    assert token not in result.stdout + result.stderr
    folder = gpu.config / "gpu-portal"
    saved = folder / "config.json"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text()) == {"url": live_server.url, "token": token}

    # Later calls need no environment: the file answers.
    whoami = gpu("whoami", "--json")
    assert whoami.returncode == 0, whoami.stderr
    assert json.loads(whoami.stdout)["token"]["name"] == "laptop"
    assert token not in whoami.stdout

    wrong = gpu("login", live_server.url, "--stdin", stdin="gpp_not-a-token\n")
    assert wrong.returncode == 1 and "did not accept that token" in wrong.stderr

    # With a password instead: gpu creates a token of its own, named for the machine.
    by_password = gpu("login", live_server.url, "--username", "alice", "--stdin", stdin="wrong\n")
    assert by_password.returncode == 1 and "Wrong username or password" in by_password.stderr

    logout = gpu("logout")
    assert logout.returncode == 0, logout.stderr
    assert ApiToken.objects.get(name="laptop").revoked_at is not None
    assert "token" not in json.loads(saved.read_text())


def test_a_revoked_or_expired_token_says_to_run_gpu_login(gpu, live_server, alice, token_of):
    token = token_of(alice)
    gpu.connect(live_server.url, token)
    token_revoke(token=ApiToken.objects.get(user=alice), actor=alice)
    revoked = gpu("hosts")
    assert revoked.returncode == 1
    assert "unknown, expired or revoked" in revoked.stderr
    assert f"Run `gpu login {live_server.url}`" in revoked.stderr

    expiring = token_of(alice, name="old")
    ApiToken.objects.filter(name="old").update(expires_at=timezone.now() - timedelta(minutes=1))
    expired = gpu("hosts", GPU_PORTAL_TOKEN=expiring)
    assert expired.returncode == 1 and "gpu login" in expired.stderr
    assert "Traceback" not in revoked.stderr + expired.stderr


def test_the_catalog_as_json_is_only_json_and_a_newer_api_warns_on_stderr(
    gpu, live_server, alice, catalog, token_of, settings
):
    gpu.connect(live_server.url, token_of(alice))
    result = gpu("types", "--gpu", "h100", "--spot", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows and {row["gpu_model"] for row in rows} == {"H100"}
    assert all(row["spot_offered"] for row in rows)
    assert all(isinstance(row["on_demand_price_per_hour"], str) for row in rows)
    assert result.stderr == ""

    settings.SPECTACULAR_SETTINGS = {**settings.SPECTACULAR_SETTINGS, "VERSION": "1.1.0"}
    newer = gpu("types", "--json")
    assert newer.returncode == 0
    assert "the portal's API is version 1.1.0" in newer.stderr
    assert len(json.loads(newer.stdout)) == len(catalog)


def test_a_refused_order_exits_1_with_the_portals_sentence(
    gpu, live_server, alice, ada, catalog, projects, token_of
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=4)
    gpu.connect(live_server.url, token_of(alice))
    result = gpu("order", "p4d.24xlarge", "--image", IMAGE, "--json")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Quota exceeded: vision-lab may run 4 GPUs; 0 are in use and this order asks for 8."
    )
    assert result.stdout == ""
    assert not Instance.objects.exists()


def test_a_cluster_ordered_from_the_terminal_has_its_nodes_ranked(
    gpu, live_server, alice, catalog, token_of
):
    gpu.connect(live_server.url, token_of(alice))
    result = gpu("order", "p4d.24xlarge", "--image", "tf-2.20-cuda12.5", "--cluster", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert "Ordered a cluster of 2x p4d.24xlarge" in result.stderr
    placed = json.loads(result.stdout)
    assert (placed["placement"], placed["nodes"], placed["efa"]) == ("cluster", 2, True)
    assert sorted(host["rank"] for host in placed["instances"]) == [0, 1]
    order = Order.objects.get()
    assert order.is_cluster and sorted(order.instances.values_list("rank", flat=True)) == [0, 1]
    refused = gpu("order", "p4d.24xlarge", "--image", "tf-2.20-cuda12.5", "--cluster", "1")
    assert refused.returncode == 1 and "A cluster has 2 to 16 nodes" in refused.stderr


def test_a_cluster_job_launched_from_the_terminal_runs_on_its_nodes(
    gpu, live_server, alice, catalog, token_of
):
    gpu.connect(live_server.url, token_of(alice))
    launch = ["jobs", "launch", "--type", "g5.xlarge", "--image", IMAGE, "--nodes", "2"]
    result = gpu(*launch, "--json", "--", "python", "train.py")
    assert result.returncode == 0, result.stderr
    assert "on 2 × g5.xlarge" in result.stderr
    job = Job.objects.get()
    assert job.nodes == 2 and job.order.is_cluster
    assert json.loads(result.stdout)["nodes"] == 2
    shown = gpu("jobs", "show", str(job.pk)[:8])
    assert "cluster of 2 × g5.xlarge" in shown.stdout, shown.stderr
    refused = gpu(*launch[:-1], "17", "--", "true")
    assert (
        refused.returncode == 1
        and "nodes: Ensure this value is less than or equal to 16" in refused.stderr
    )
    assert Job.objects.count() == 1


def test_alice_orders_two_spot_hosts_waits_for_them_ssh_es_and_terminates_them(
    gpu, live_server, alice, catalog, token_of, worker_process, tmp_path
):
    worker_process()
    gpu.connect(live_server.url, token_of(alice))
    result = gpu(
        "order",
        "g5.xlarge",
        "--image",
        IMAGE,
        "--market",
        "spot",
        "--count",
        "2",
        "--lease",
        "8h",
        "--wait",
        "--json",
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    order = json.loads(result.stdout)
    assert order["market"] == "spot" and order["lease_hours"] == 8
    assert [host["status"] for host in order["instances"]] == ["running", "running"]
    # On a pipe: the placement line, and no spinner.
    assert result.stderr.startswith("Ordered 2x g5.xlarge (spot) in vision-lab")
    assert "Waiting" not in result.stderr

    listed = json.loads(gpu("hosts", "--json").stdout)
    assert {host["id"] for host in listed} == {host["id"] for host in order["instances"]}
    first = Instance.objects.get(pk=order["instances"][0]["id"])

    config = gpu("ssh-config")
    assert f"Host {first.name}\n    HostName {first.public_ip}\n    User ubuntu\n" in config.stdout

    # gpu ssh execs the ssh on PATH: this one says what it was given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text('#!/bin/sh\necho "ssh $*"\n')
    (bin_dir / "ssh").chmod(0o755)
    ssh = gpu("ssh", first.name, "-L", "6006:localhost:6006", PATH=f"{bin_dir}:/usr/bin:/bin")
    assert ssh.returncode == 0, ssh.stderr
    assert ssh.stdout.strip() == f"ssh ubuntu@{first.public_ip} -L 6006:localhost:6006"

    # The cloud does not stop spot hosts: the portal's sentence, exit 1.
    stop = gpu("stop", first.name)
    assert stop.returncode == 1 and "spot" in stop.stderr.lower()

    extend = gpu("extend", str(first.pk)[:8], "4h")
    assert extend.returncode == 0, extend.stderr
    first.refresh_from_db()
    assert first.lease_extended_hours == 4

    names = [host["name"] for host in order["instances"]]
    ended = gpu("terminate", *names)
    assert ended.returncode == 0, ended.stderr
    assert all(f"{name}: terminat" in ended.stderr for name in names)


def test_costs_for_a_month_by_market_come_as_the_portal_rounds_them(
    gpu, live_server, fin, token_of
):
    gpu.connect(live_server.url, token_of(fin))
    shown = gpu("costs", "--month", "2026-11", "--by", "market")
    assert shown.returncode == 0, shown.stderr
    assert "2026-11-01 to 2026-11-30 (UTC), USD" in shown.stdout
    report = json.loads(gpu("costs", "--month", "2026-11", "--by", "market", "--json").stdout)
    assert (report["start"], report["end"], report["group_by"]) == (
        "2026-11-01",
        "2026-11-30",
        "market",
    )
    assert report["total"]["cost"] == "0.00"
    bad = gpu("costs", "--month", "2026-13")
    assert bad.returncode == 2


@pytest.fixture
def agents(settings, live_server, tmp_path):
    """Job hosts run their agent as a process of their own against the live server."""
    settings.PORTAL_SIMULATED_AGENTS = True
    settings.PORTAL_AGENT_URL = live_server.url
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.VAR_DIR = tmp_path / "var"
    yield
    for host in Instance.objects.all():
        host_agents().end(host.pk, grace=2.0)


def _boot_when_ordered() -> Job:
    """Provision the job's host as the worker's task would, once gpu has submitted it."""
    job = wait_for(Job.objects.first, timeout=30)
    host = wait_for(lambda: job.order.instances.filter(status="requested").first(), timeout=30)
    services.instance_provision(instance_id=host.pk)
    return job


def test_a_jobs_output_is_followed_to_its_end_and_a_failure_exits_3(
    gpu, live_server, alice, catalog, token_of, agents
):
    gpu.connect(live_server.url, token_of(alice))
    launch = gpu.popen(
        "jobs",
        "launch",
        "--type",
        "g5.xlarge",
        "--image",
        IMAGE,
        "--name",
        "train",
        "--env",
        "EPOCHS=3",
        "--follow",
        "--",
        'for e in $(seq "$EPOCHS"); do echo "epoch $e"; sleep 0.3; done; echo "loss is nan" >&2;'
        " exit 3",
    )
    job = _boot_when_ordered()
    stdout, stderr = launch.communicate(timeout=60)
    assert launch.returncode == 3, stderr
    assert stdout.index("epoch 1") < stdout.index("epoch 3") < stdout.index("loss is nan")
    assert f"Launched job {job.pk} (train)" in stderr
    assert f"Job {str(job.pk)[:8]} failed (exit code 3)" in stderr

    listed = json.loads(gpu("jobs", "list", "--json").stdout)
    assert [(row["id"], row["status"]) for row in listed] == [(str(job.pk), "failed")]
    # Read again later, the whole log comes back the same, and gpu logs needs no -f to end.
    again = gpu("jobs", "logs", str(job.pk)[:6])
    assert again.returncode == 0 and again.stdout == stdout

    rerun = gpu("jobs", "rerun", str(job.pk), "--json")
    assert rerun.returncode == 0, rerun.stderr
    second = json.loads(rerun.stdout)
    assert second["rerun_of"] == str(job.pk) and second["status"] == "pending"
    cancel = gpu("jobs", "cancel", second["id"][:8])
    assert cancel.returncode == 0 and "cancelled" in cancel.stderr


def test_an_order_waiting_for_approval_is_decided_from_the_terminal(
    gpu, live_server, alice, ada, catalog, projects, token_of, tmp_path
):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=0)
    gpu.connect(live_server.url, token_of(alice))
    waiting = gpu.popen("order", "g5.xlarge", "--image", IMAGE, "--wait")
    order = wait_for(_held_order, timeout=30)

    deciders = Gpu(tmp_path / "ada").connect(live_server.url, token_of(ada))
    listed = json.loads(deciders("approvals", "--json").stdout)
    assert [row["id"] for row in listed] == [str(order.pk)]
    reject = deciders("approvals", "reject", str(order.pk)[:8], "--reason", "use spot for this")
    assert reject.returncode == 0, reject.stderr

    stdout, stderr = waiting.communicate(timeout=30)
    assert waiting.returncode == 1
    assert f"Order {order.pk} was rejected: use spot for this" in stderr
    assert stdout == ""


def _held_order() -> Order | None:
    return Order.objects.filter(status="pending_approval").first()


def test_gpu_notebook_prints_the_address_of_the_hosts_jupyterlab_and_stops_it(
    gpu, live_server, alice, carol, running_host, token_of, settings
):
    from instances import services
    from instances.models import Notebook
    from instances.providers.simulated_agents import host_agents

    settings.PORTAL_SIMULATED_AGENTS = True
    host = running_host()
    # What the worker does once the notebook is asked for (tests/browser/test_notebook_browser.py
    # has a real worker do it).
    opened = services.notebook_open(instance=host, actor=alice)
    try:
        assert services.notebook_launch(notebook_id=opened.pk).status == "running"
        gpu.connect(live_server.url, token_of(alice))
        result = gpu("notebook", host.name, "--no-open")
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{live_server.url}/notebook/{host.pk}/lab\n"
        as_json = json.loads(gpu("notebook", host.name, "--json").stdout)
        assert as_json["status"] == "running"
        refused = gpu.connect(live_server.url, token_of(carol))("notebook", str(host.pk))
        assert refused.returncode == 1 and "Not found" in refused.stderr
        stopped = gpu.connect(live_server.url, token_of(alice))("notebook", host.name, "--stop")
        assert stopped.returncode == 0, stopped.stderr
        assert Notebook.objects.get(pk=opened.pk).status == Notebook.Status.ENDED
    finally:
        host_agents().notebook_end(host.pk)
