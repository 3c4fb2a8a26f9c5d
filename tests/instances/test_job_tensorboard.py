"""A job's real TensorBoard, served by the portal over the job's log folder: to whoever may see
the job, every request audited, and nothing else reachable through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from audit.models import AuditEvent
from instances.lib import tensorboard
from instances.models import Order
from tests.instances.test_jobs import job_body, submit

__all__ = ["job_body", "submit"]  # the fixtures, shared with test_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_TENSORBOARD_RELOAD_SECONDS = 0


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def write_events(job, run: str, points) -> Path:
    """What Keras' TensorBoard callback writes, by TensorBoard's own writer (real CRCs)."""
    folder = Path(tensorboard.logdir_of(job.order.checkpoint_uri)) / run
    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder))
    for step, value in points:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="epoch_loss", simple_value=value)]
        )
        writer.add_event(event_pb2.Event(wall_time=1.5 + step, step=step, summary=summary))
    writer.close()
    return folder


def test_the_job_page_opens_its_tensorboard_which_draws_what_the_job_wrote(submit, alice):
    job = submit()
    write_events(job, "train", [(0, 2.5), (1, 1.25)])
    page = browser(alice).get(f"/jobs/{job.pk}/")
    assert f'href="/tensorboard/{job.pk}/"' in page.content.decode()

    home = browser(alice).get(f"/tensorboard/{job.pk}/")
    assert home.status_code == 200 and b"<tb-webapp" in home.content  # TensorBoard's app
    # TensorBoard's own policy, not the portal's (its frontend needs its own).
    assert "default-src 'self'" in home["Content-Security-Policy"]

    runs = browser(alice).get(f"/tensorboard/{job.pk}/data/runs")
    assert runs.json() == ["train"]
    tags = browser(alice).get(f"/tensorboard/{job.pk}/data/plugin/scalars/tags").json()
    assert "epoch_loss" in tags["train"]
    # The charts ask in a batch, by POST, as TensorBoard's frontend does.
    batch = browser(alice).post(
        f"/tensorboard/{job.pk}/data/plugin/scalars/scalars_multirun",
        {"tag": "epoch_loss", "runs": ["train"]},
    )
    assert [point[1:] for point in batch.json()["train"]] == [[0, 2.5], [1, 1.25]]

    # A new epoch is there on the next read.
    write_events(job, "train", [(2, 0.5)])
    batch = browser(alice).post(
        f"/tensorboard/{job.pk}/data/plugin/scalars/scalars_multirun",
        {"tag": "epoch_loss", "runs": ["train"]},
    )
    assert [point[1] for point in batch.json()["train"]] == [0, 1, 2]


def test_only_those_who_may_see_the_job_reach_its_tensorboard_and_each_request_is_audited(
    submit, alice, bob, carol, fin
):
    job = submit()
    write_events(job, "train", [(0, 1.0)])
    url = f"/tensorboard/{job.pk}/data/runs"
    assert browser(bob).get(url).status_code == 200  # same project
    assert browser(fin).get(url).status_code == 200  # finance reads every project
    assert browser(carol).get(url).status_code == 404  # as for the job itself
    assert browser(carol).get(f"/jobs/{job.pk}/").status_code == 404
    assert Client().get(url).status_code == 302  # to the sign-in page
    rows = AuditEvent.objects.filter(path=url).order_by("seq")
    assert [(row.actor_username, row.status) for row in rows] == [
        ("bob", 200),
        ("fin", 200),
        ("carol", 404),
        ("", 302),
    ]


def test_nothing_but_the_jobs_own_tensorboard_is_reachable_through_it(submit, alice, carol):
    job = submit()
    others = submit(user=carol, project="nlp-lab", name="theirs")
    write_events(others, "secret-run", [(0, 9.0)])
    write_events(job, "train", [(0, 1.0)])
    mine = browser(alice)
    # Another job's board is another URL, which answers as its job does: 404 to alice.
    assert mine.get(f"/tensorboard/{others.pk}/data/runs").status_code == 404
    # Climbing out of the prefix, or naming a host, reaches nothing but TensorBoard's routes.
    for path in ("/../../etc/passwd", "/data/../../../etc/passwd", "//example.com/", "/%2e%2e/"):
        answer = mine.get(f"/tensorboard/{job.pk}{path}")
        assert answer.status_code in (301, 302, 400, 404), (path, answer.status_code)
        assert b"root:" not in answer.content and b"secret-run" not in answer.content
    assert mine.put(f"/tensorboard/{job.pk}/data/runs").status_code == 405


def test_a_job_without_a_log_folder_has_no_tensorboard_on_offer(submit, alice):
    job = submit()
    # As on a cloud with no checkpoint prefix set: the order has no checkpoint location.
    Order.objects.filter(pk=job.order_id).update(checkpoint_uri="")
    assert "/tensorboard/" not in browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    answer = browser(alice).get(f"/tensorboard/{job.pk}/")
    assert answer.status_code == 404


def test_the_log_folder_is_the_one_beside_the_checkpoints():
    assert tensorboard.logdir_of("s3://bucket/ck/vision-lab/o1/") == (
        "s3://bucket/ck/vision-lab/o1/tensorboard/"
    )
    assert tensorboard.logdir_of("file:///var/ck/p/o1/") == "/var/ck/p/o1/tensorboard/"
    assert tensorboard.logdir_of("") == ""


def test_tensorboards_fonts_load_from_its_own_assets_and_nothing_else_does(alice):
    font = browser(alice).get("/font-roboto/oMMgfZMQthOryQo9n22dcuvvDin1pK8aKteLpeZ5c0A.woff2")
    assert font.status_code == 200 and font["Content-Type"] == "font/woff2"
    assert font.content[:4] == b"wOF2"
    for name in ("roboto.html", "nope.woff2", "..%2Findex.html"):
        assert browser(alice).get(f"/font-roboto/{name}").status_code == 404
    assert Client().get("/font-roboto/nope.woff2").status_code == 302  # signed in only
