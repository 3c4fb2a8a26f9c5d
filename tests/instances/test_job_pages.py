"""The jobs pages: the list, a new job (and its refusals beside the fields), a job's page with
its reason, runs, hosts, cost and log (escapes dropped, HTML escaped, the tail first, the rest
polled from an offset), and cancel and re-run from there."""

from __future__ import annotations

import base64
import uuid

import pytest
from django.test import Client

from instances.models import Job, JobWorkdir
from instances.services.jobs import job_submit
from tests.instances.test_cluster_jobs import launch
from tests.instances.test_jobs import Agent, boot

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


FORM = {
    "project": "vision-lab",
    "name": "bert",
    "instance_type": "g5.xlarge",
    "image": "tf-2.17-cuda12.3",
    "market": "spot_then_on_demand",
    "command": "python train.py",
    "env": "SEED=7\nLR=0.001",
    "time_limit_minutes": "90",
    "max_recoveries": "",
    "max_restarts": "1",
    "retry_exit_codes": "75",
    "keep_host_minutes": "0",
    "submission": "6d2c9c39-43b8-4e55-8c43-8b8c1e0a3b7a",
}


def test_a_job_submitted_from_the_page_lands_on_its_page(alice, catalog):
    client = signed_in(alice)
    assert client.get("/jobs/new/").status_code == 200
    answer = client.post("/jobs/new/", FORM)
    job = Job.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{job.pk}/"
    assert job.env == {"SEED": "7", "LR": "0.001"} and job.retry_exit_codes == [75]
    assert job.max_recoveries is None and job.order.interruption_policy == "fallback_on_demand"
    # The same form sent twice (a double click) is one job.
    client.post("/jobs/new/", FORM)
    assert Job.objects.count() == 1
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Waiting for its host to launch" in page
    assert "No run yet" in page
    listing = client.get("/jobs/").content.decode()
    assert 'data-job="bert"' in listing and "Pending" in listing


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"command": " "}, "command", "The command is empty"),
        ({"env": "NOEQUALS"}, "env", "NAME=value"),
        ({"time_limit_minutes": "0"}, "time_limit_minutes", "between 1 and"),
        ({"retry_exit_codes": "a, b"}, "retry_exit_codes", "as numbers"),
        ({"image": "tf-2.9-cuda11.2"}, "image", ""),
        ({"nodes": "17"}, "nodes", "2 to 16 (a cluster job"),
        ({"nodes": "0"}, "nodes", "2 to 16 (a cluster job"),
        ({"nodes": "two"}, "nodes", "whole number"),
    ],
)
def test_a_refused_job_says_why_beside_the_field(alice, catalog, changes, field, said):
    answer = signed_in(alice).post("/jobs/new/", {**FORM, **changes})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert f'id="id_{field}-error"' in page and said in page
    assert not Job.objects.exists()


def test_a_cluster_job_from_the_page_shows_its_nodes_and_each_runs_rank(alice, catalog):
    client = signed_in(alice)
    assert 'name="nodes"' in client.get("/jobs/new/").content.decode()
    client.post("/jobs/new/", {**FORM, "nodes": "2", "market": "on_demand"})
    job = Job.objects.get()
    assert job.nodes == 2 and job.order.placement == "cluster"
    for node in launch(job):
        Agent(node).ask()
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Cluster of 2 × g5.xlarge" in page
    assert 'data-rank="0"' in page and 'data-rank="1"' in page and "chief" in page
    assert "· rank 1" in page
    assert "2 × g5.xlarge" in client.get("/jobs/").content.decode()
    # Edit and run copies the nodes.
    copy = client.get(f"/jobs/new/?from={job.pk}").content.decode()
    assert 'name="nodes" id="id_nodes" min="1" max="16" value="2"' in copy


def test_finance_cannot_open_the_new_job_page(fin):
    assert signed_in(fin).get("/jobs/new/").status_code == 403


def test_the_log_drops_escapes_escapes_html_and_is_polled_from_its_offset(alice, catalog):
    client = signed_in(alice)
    client.post("/jobs/new/", FORM)
    job = Job.objects.get()
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=3)
    out = b"\x1b[32mepoch 1\x1b[0m <script>alert(1)</script>\n"
    agent.post("log", **ref, offset=0, data=base64.b64encode(out).decode())
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "epoch 1 &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page
    job.refresh_from_db()
    more = f"/jobs/{job.pk}/log/?offset={job.log_bytes}"
    assert more in page
    agent.post("log", **ref, offset=len(out), data=base64.b64encode(b"epoch 2\n").decode())
    tail = client.get(more).content.decode()
    assert tail.startswith("epoch 2\n") and "offset=" in tail
    download = client.get(f"/jobs/{job.pk}/log.txt")
    assert b"".join(download.streaming_content).endswith(out + b"epoch 2\n")


def test_cancel_and_rerun_from_the_page(alice, bob, catalog):
    client = signed_in(alice)
    client.post("/jobs/new/", FORM)
    job = Job.objects.get()
    assert signed_in(bob).post(f"/jobs/{job.pk}/cancel/").status_code == 403
    client.post(f"/jobs/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.status == "cancelled"
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Re-run" in page and "Cancelled by alice" in page
    answer = client.post(f"/jobs/{job.pk}/rerun/")
    new = Job.objects.exclude(pk=job.pk).get()
    assert answer["Location"] == f"/jobs/{new.pk}/" and new.rerun_of == job


def test_a_working_folder_uploaded_from_the_page_goes_with_the_job_or_says_why_not(
    alice, catalog, settings
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.instances.test_jobs import tar

    archive = tar({"train.py": b"print(1)\n"})
    client = signed_in(alice)
    assert 'enctype="multipart/form-data"' in client.get("/jobs/new/").content.decode()
    upload = SimpleUploadedFile("code.tar.gz", archive, content_type="application/gzip")
    answer = client.post("/jobs/new/", {**FORM, "workdir_tarball": upload})
    job = Job.objects.get()
    assert answer.status_code == 302 and bytes(job.workdir.data) == archive
    settings.PORTAL_JOB_WORKDIR_MAX_BYTES = 100
    big = SimpleUploadedFile("big.tar", tar({"x": bytes(4096)}, gz=False))
    other = {**FORM, "submission": "0b6f8d8e-2b3e-4a3c-9c1f-6a7d2e9f4b10", "workdir_tarball": big}
    answer = client.post("/jobs/new/", other)
    assert answer.status_code == 400
    page = answer.content.decode()
    assert 'id="id_workdir_tarball-error"' in page and "over the 100 bytes a job may upload" in page
    assert Job.objects.count() == 1


def as_sent(page: str) -> dict[str, str]:
    """What a browser sends for the job form as the page renders it (ticked boxes and radios,
    selected options, textareas), with nothing typed."""
    from bs4 import BeautifulSoup

    form = BeautifulSoup(page, "html.parser").select_one("form#job-form")
    sent: dict[str, str] = {}
    for field in form.select("input[name], textarea[name], select[name]"):
        kind = field.get("type", "")
        if field.name == "textarea":
            sent[field["name"]] = field.text.removeprefix("\n")
        elif field.name == "select":
            chosen = field.select_one("option[selected]") or field.select_one("option")
            sent[field["name"]] = chosen["value"]
        elif kind in ("checkbox", "radio"):
            if field.has_attr("checked"):
                sent[field["name"]] = field.get("value", "on")
        elif kind != "file":
            sent[field["name"]] = field.get("value", "")
    return sent


def ended_slice_job(alice, catalog, projects, name: str = "slice-run") -> tuple[Job, bytes]:
    """A cancelled job of Alice's on a MIG slice, with her key, SIGINT and 90 s of grace, and
    an uploaded archive (returned beside it)."""
    from instances.services.jobs import job_cancel
    from tests.conftest import ED25519
    from tests.instances.test_jobs import tar

    archive = tar({"train.py": b"print(1)\n"})
    source = job_submit(
        requester=alice,
        project=projects["vision-lab"],
        instance_type=catalog["p4d.24xlarge"],
        image=catalog["p4d.24xlarge"].compatible_images()[0],
        market="on_demand",
        name=name,
        command="python train.py --lr 0.1",
        mig_profile="1g.5gb",
        ssh_public_key=ED25519,
        stop_signal="SIGINT",
        grace_seconds=90,
        workdir=archive,
    )
    return job_cancel(job=source, user=alice), archive


def test_edit_and_run_keeps_the_slice_key_signal_and_uploaded_folder(
    alice, catalog, projects, settings
):
    """Edit and run sent as the page renders it makes the job Re-run would, where it dropped
    the MIG slice, the SSH key, the stop signal and grace, and the uploaded folder."""
    from tests.conftest import ED25519

    settings.PORTAL_SIMULATED_AGENTS = True  # slice sessions: the simulated agents run them
    source, archive = ended_slice_job(alice, catalog, projects)
    client = signed_in(alice)
    page = client.get(f"/jobs/new/?from={source.pk}").content.decode()
    assert "Use the archive uploaded with slice-run again" in page
    sent = as_sent(page)
    assert sent["mig_profile"] == "1g.5gb" and sent["ssh_public_key"].strip() == ED25519
    assert (sent["stop_signal"], sent["grace_seconds"]) == ("SIGINT", "90")
    assert client.post("/jobs/new/", sent).status_code == 302
    copy = Job.objects.exclude(pk=source.pk).get()
    assert copy.order.is_mig_slice and copy.order.mig_profile.name == "1g.5gb"
    assert copy.order.ssh_public_key == ED25519
    assert (copy.stop_signal, copy.grace_seconds) == ("SIGINT", 90)
    assert bytes(copy.workdir.data) == archive
    # Unticked, or a repository given instead: no archive goes with the new job.
    for change in ({"reuse_workdir": None}, {"workdir_git": "https://git.example.org/lab/p.git"}):
        again = {**sent, "submission": str(uuid.uuid4()), **change}
        client.post("/jobs/new/", {k: v for k, v in again.items() if v is not None})
        newest = Job.objects.order_by("-created_at").first()
        assert not JobWorkdir.objects.filter(job=newest).exists()


def test_the_new_job_page_offers_signal_grace_key_and_slices(alice, catalog, settings):
    client = signed_in(alice)
    page = client.get("/jobs/new/").content.decode()
    assert 'name="stop_signal"' in page and 'name="grace_seconds"' in page
    assert 'name="ssh_public_key"' in page
    assert 'name="mig_profile"' not in page  # this cloud gives no slice sessions
    settings.PORTAL_SIMULATED_AGENTS = True
    page = client.get("/jobs/new/").content.decode()
    assert "1g.5gb · 1/7 of a GPU, 5 GB · p4d.24xlarge" in page
    for change, field in (
        ({"stop_signal": "SIGKILL"}, "stop_signal"),
        ({"grace_seconds": "601"}, "grace_seconds"),
        ({"mig_profile": "1g.5gb", "market": "on_demand"}, "mig_profile"),  # not on a g5
        ({"ssh_public_key": "not a key"}, "ssh_public_key"),
    ):
        answer = client.post("/jobs/new/", {**FORM, **change})
        assert answer.status_code == 400
        assert f'id="id_{field}-error"' in answer.content.decode()
    assert not Job.objects.exists()


def test_a_capped_log_says_where_the_rest_is_kept(alice, catalog):
    """The note pointed at run-N.log on the host, gone once the job ended: on S3 the agent
    uploads each run's log beside the checkpoints, and the note names that location."""
    from instances.models import Order

    client = signed_in(alice)
    client.post("/jobs/new/", FORM)
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(log_capped=True, log_bytes=200)
    note = client.get(f"/jobs/{job.pk}/").content.decode().split('data-testid="log-capped">')[1]
    assert "on its host while that host lives" in note.split("</p>")[0]
    uri = "s3://lab-checkpoints/vision-lab/0b0e/"
    Order.objects.filter(pk=job.order_id).update(checkpoint_uri=uri)
    note = client.get(f"/jobs/{job.pk}/").content.decode().split('data-testid="log-capped">')[1]
    assert f"in the job's checkpoint location, <code>{uri}</code>" in note.split("</p>")[0]
