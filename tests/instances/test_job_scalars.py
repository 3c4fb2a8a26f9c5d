"""A job's TensorBoard scalars: the agent's reader (instances/agent/tfevents.py) reads what
TensorFlow writes, event file by event file and pass after pass; the portal keeps each (tag,
step) once, within a job's bounds, and the job's page and API give them as series."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import textwrap

import pytest
from django.test import Client

from instances.agent.tfevents import Scalars
from instances.models import JobScalar
from instances.services.jobs.runs import SCALAR_TAGS_MAX
from tests.instances.test_jobs import Agent, boot, job_body, submit

__all__ = ["job_body", "submit"]  # the fixtures, shared with test_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def tf1_event(tag: str, step: int, value: float, wall: float = 1.5) -> bytes:
    """An Event with a simple_value, as TF1 and tensorboardX write them."""
    item = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
    summary = _field(1, 2, item)
    return (
        _field(1, 1, struct.pack("<d", wall)) + _field(2, 0, _varint(step)) + _field(5, 2, summary)
    )


def record(data: bytes) -> bytes:
    # TFRecord framing: length, its CRC, the data, its CRC (the reader does not check CRCs).
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def test_the_reader_takes_tf1_scalars_and_leaves_a_half_written_record_for_later(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    events = train / "events.out.tfevents.1.host"
    whole, half = record(tf1_event("loss", 1, 0.5)), record(tf1_event("loss", 2, 0.25))
    events.write_bytes(whole + half[:10])
    reader = Scalars(str(tmp_path))
    assert reader.new() == [("train/loss", 1, 0.5, 1.5)]
    with events.open("ab") as file:
        file.write(half[10:])
    assert reader.new() == [("train/loss", 2, 0.25, 1.5)]
    assert reader.new() == []


def test_the_reader_takes_what_tensorflow_2_and_keras_write(tmp_path):
    script = textwrap.dedent(
        f"""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        with tf.summary.create_file_writer({str(tmp_path / "custom")!r}).as_default():
            for step in range(3):
                tf.summary.scalar("lr", 0.1 / (step + 1), step=step)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    points = Scalars(str(tmp_path)).new()
    assert [(tag, step) for tag, step, _, _ in points] == [("custom/lr", s) for s in range(3)]
    assert [round(value, 4) for _, _, value, _ in points] == [0.1, 0.05, 0.0333]


def test_the_agent_posts_scalars_the_portal_keeps_once_per_step(submit, api_as, alice, carol):
    job = submit()
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=1)

    def send(*points):
        body = [{"tag": t, "step": s, "value": v, "wall_time": 1.0} for t, s, v in points]
        return agent.post("scalars", **ref, points=body)

    assert send(("train/loss", 0, 0.9), ("train/loss", 1, 0.7)).json()["stored"] == 2
    # A resumed run writes step 1 again: it replaces the first.
    send(("train/loss", 1, 0.6), ("train/loss", 2, 0.5))
    series = api_as(alice).get(f"/api/v1/jobs/{job.pk}/scalars/").json()
    assert series == {"train/loss": [[0, 0.9], [1, 0.6], [2, 0.5]]}
    browser = Client()
    browser.force_login(alice)
    assert browser.get(f"/jobs/{job.pk}/metrics/").json() == series
    assert api_as(carol).get(f"/api/v1/jobs/{job.pk}/scalars/").status_code == 404
    bad = agent.post(
        "scalars", **ref, points=[{"tag": "x", "step": -1, "value": 1, "wall_time": 1}]
    )
    assert bad.status_code == 400 and "points" in str(bad.json()["fields"])


def test_a_jobs_scalars_are_bounded(submit):
    job = submit()
    agent = Agent(boot(job))
    assignment = agent.ask().json()
    ref = {"job": assignment["job"], "run": 1}
    agent.post("started", **ref, pid=1)
    points = [
        {"tag": f"tag-{n}", "step": 0, "value": 1.0, "wall_time": 1.0}
        for n in range(SCALAR_TAGS_MAX + 5)
    ]
    answer = agent.post("scalars", **ref, points=points).json()
    assert answer == {"stored": SCALAR_TAGS_MAX, "capped": True}
    assert JobScalar.objects.filter(job=job).values("tag").distinct().count() == SCALAR_TAGS_MAX
    assert math.isfinite(JobScalar.objects.first().value)


def test_every_tag_a_job_keeps_is_drawn_with_its_points_thinned(submit, api_as, alice):
    """The page and the API gave the first 16 tags (alphabetically) though a job keeps 64 and
    the docs say every scalar is drawn."""
    from instances.selectors.jobs import CHART_POINTS, chart_points

    job = submit()
    JobScalar.objects.bulk_create(
        JobScalar(job=job, tag=f"tag-{n:02}", step=step, value=step / 10, wall_time=1.0)
        for n in range(SCALAR_TAGS_MAX)
        for step in range(CHART_POINTS + 1)
    )
    series = api_as(alice).get(f"/api/v1/jobs/{job.pk}/scalars/").json()
    assert sorted(series) == [f"tag-{n:02}" for n in range(SCALAR_TAGS_MAX)]
    most = chart_points(SCALAR_TAGS_MAX)
    assert most < CHART_POINTS
    steps = [step for step, _ in series["tag-63"]]
    assert len(steps) == most and steps[0] == 0 and steps[-1] == CHART_POINTS
    assert steps == sorted(set(steps))
