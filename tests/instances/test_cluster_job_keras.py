"""A real two-worker ``MultiWorkerMirroredStrategy`` Keras training as a cluster job of two spot
hosts of the simulated cloud: each host's agent runs on this machine, each worker reads the
TF_CONFIG the portal hands its node (the workers talk over loopback), and the chief saves with
``BackupAndRestore(CHECKPOINT_DIR)``. Rank 1's host is warned during the fourth epoch: the run
stops on both nodes, only rank 1's host is replaced (with rank 1), and the next run starts on
both nodes at once and resumes at epoch 4, not 1.

Keras 3 does not run MultiWorkerMirroredStrategy (keras-team/keras#20585): the script runs
Keras 2 (the tf-keras package) through TF_USE_LEGACY_KERAS, as the README says to."""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.core.management import call_command

from instances import services
from instances.models import Instance, Job
from instances.providers.simulated_agents import host_agents
from tests.instances.test_job_execution import agents, log_of, submit
from tests.workers import wait_for

__all__ = ["agents"]  # the fixture, shared with test_job_execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

TRAIN = f"""{sys.executable} - <<'PY'
import json, os, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {{index}} of {{strategy.num_replicas_in_sync}}", flush=True)

class Say(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print(f"epoch {{epoch + 1}} begins", flush=True)
        if epoch == 3 and os.environ["JOB_RECOVERY"] == "0":
            time.sleep(120)  # the warning lands inside the first run's fourth epoch
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {{epoch + 1}} ends: loss {{logs['loss']:.4f}}", flush=True)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input((8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile("adam", "binary_crossentropy")
model.fit(data, epochs=6, verbose=0, callbacks=[
    tf.keras.callbacks.BackupAndRestore(os.environ["CHECKPOINT_DIR"]),
    Say(),
])
print("trained", flush=True)
PY"""


def story(job: Job) -> str:
    """The job's log and the tail of each node's agent log, for a run that timed out."""
    agent_logs = [
        f"--- agent of rank {host.rank}:\n{_tail(host_agents().folder(host.pk) / 'agent.log')}"
        for host in Instance.objects.filter(order=job.order).order_by("rank", "created_at")
    ]
    return "\n".join([log_of(job)[-3000:], *agent_logs])


def _tail(path) -> str:
    return path.read_text(errors="replace")[-1500:] if path.exists() else "(none)"


def ranks_saw(text: str, line: str) -> set[str]:
    return {rank for rank in ("0", "1") if f"[rank {rank}] {line}" in text}


def test_a_two_worker_keras_cluster_job_resumes_on_both_nodes_after_one_is_interrupted(
    agents, alice, projects, catalog
):
    job = submit(alice, projects, catalog, market="spot", command=TRAIN, nodes=2)
    for node in job.order.instances.all():
        services.instance_provision(instance_id=node.pk)
    first = list(job.order.instances.order_by("rank"))
    assert [node.status for node in first] == [Instance.Status.RUNNING] * 2
    wait_for(
        lambda: ranks_saw(log_of(job), "epoch 3 ends") == {"0", "1"},
        timeout=120,
        what="both workers' third epoch",
        detail=lambda: story(job),
    )
    text = log_of(job)
    assert ranks_saw(text, "worker 0 of 2") == {"0"} and ranks_saw(text, "worker 1 of 2") == {"1"}
    # The cloud warns it takes rank 1's host back (the console's command, then the drain beat).
    call_command("simulated_cloud", "warn", first[1].cloud_id, stdout=StringIO())
    services.spot_events_drain()
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Job.Status.RECOVERING,
        timeout=30,
        what="recovering",
        detail=lambda: story(job),
    )
    replacement = first[1].replacements.get()
    assert replacement.rank == 1 and not first[0].replacements.exists()
    services.instance_provision(instance_id=replacement.pk)
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Job.Status.SUCCEEDED,
        timeout=150,
        what="success",
        detail=lambda: story(job),
    )
    text = log_of(job)
    run_one, run_two = text.split("=== run 2 on 2 nodes: ", 1)
    assert ranks_saw(run_one, "epoch 3 ends") == {"0", "1"}
    for rank in ("0", "1"):
        begun = [line for line in run_two.splitlines() if line.startswith(f"[rank {rank}] epoch ")]
        assert begun[0] == f"[rank {rank}] epoch 4 begins", run_two[-3000:]
    assert "epoch 1 begins" not in run_two and ranks_saw(run_two, "trained") == {"0", "1"}
    job.refresh_from_db()
    assert job.recoveries == 1
    assert [(run.number, run.rank, run.outcome) for run in job.runs.all()] == [
        (1, 0, "stopped"),
        (1, 1, "interrupted"),
        (2, 0, "succeeded"),
        (2, 1, "succeeded"),
    ]
    # Run 2's workers found each other at rank 0's address and the replacement's.
    second = {run.rank: run.host_id for run in job.runs.filter(number=2)}
    assert second == {0: first[0].pk, 1: replacement.pk}
