"""A real Keras training as a managed job on a spot host of the simulated cloud: it saves with
``tf.keras.callbacks.BackupAndRestore(CHECKPOINT_DIR)``, the host is warned after its third
epoch (simulated_cloud warn, as the cloud's two-minute warning), and the job recovers on a
replacement host and resumes at epoch 4, not 1, and succeeds. TensorFlow is a test-only
dependency (tensorflow, with tf-keras); the job runs it in this interpreter."""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.core.management import call_command

from instances import services
from instances.models import Job
from instances.selectors.jobs import job_scalar_series
from tests.instances.test_job_execution import agents, boot, log_of, submit
from tests.workers import wait_for

__all__ = ["agents"]  # the fixture, shared with test_job_execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

TRAIN = f"""{sys.executable} - <<'PY'
import os, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf

class Say(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print(f"epoch {{epoch + 1}} begins", flush=True)
        if epoch == 3 and os.environ["JOB_RECOVERY"] == "0":
            # The first run's fourth epoch is a long one: the warning lands inside it, as it
            # would in a real training whose epochs take minutes.
            time.sleep(120)
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {{epoch + 1}} ends: loss {{logs['loss']:.4f}}", flush=True)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = tf.keras.Sequential([
    tf.keras.Input((8,)),
    tf.keras.layers.Dense(16, activation="relu"),
    tf.keras.layers.Dense(1, activation="sigmoid"),
])
model.compile("adam", "binary_crossentropy")
model.fit(x, y, epochs=6, batch_size=32, verbose=0, callbacks=[
    tf.keras.callbacks.BackupAndRestore(os.environ["CHECKPOINT_DIR"]),
    tf.keras.callbacks.TensorBoard(os.environ["TENSORBOARD_LOG_DIR"]),
    Say(),
])
print("trained", flush=True)
PY"""


def test_keras_training_resumes_at_epoch_4_after_an_interruption(agents, alice, projects, catalog):
    job = submit(alice, projects, catalog, market="spot", command=TRAIN)
    first = boot(job)
    wait_for(lambda: "epoch 3 ends" in log_of(job), timeout=90, what="the third epoch")
    # The cloud warns it takes the host back (the console's command, then the drain beat runs).
    call_command("simulated_cloud", "warn", first.cloud_id, stdout=StringIO())
    services.spot_events_drain()
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Job.Status.RECOVERING,
        timeout=30,
        what="recovering",
    )
    second = boot(job)
    assert second.replaces == first
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Job.Status.SUCCEEDED,
        timeout=120,
        what="success",
    )
    text = log_of(job)
    run_one, run_two = text.split("=== run 2 on host ", 1)
    assert "epoch 3 ends" in run_one
    begun = [line for line in run_two.splitlines() if line.endswith(" begins")]
    assert begun[0] == "epoch 4 begins", run_two[-2000:]
    assert "epoch 1 begins" not in run_two and "trained" in run_two
    job.refresh_from_db()
    assert job.recoveries == 1
    assert [run.outcome for run in job.runs.all()] == ["interrupted", "succeeded"]
    moved = job.events.get(old_status="running", new_status="recovering")
    assert "taking back spot host" in moved.reason
    # The Keras TensorBoard callback's scalars, read by the agents of both runs: every epoch.
    series = job_scalar_series(job)
    assert [step for step, _ in series["train/epoch_loss"]] == [0, 1, 2, 3, 4, 5]
