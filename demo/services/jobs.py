"""The demo's jobs, so a newcomer opens Jobs to one of each: a training job that finished after
a spot interruption (recovered once), one that failed with its log kept, and one running now,
on a host whose agent really runs it on this machine (its log grows while you watch).

The first two are played at seeding through the same services a host's agent calls, on hosts of
the simulated cloud with no process behind them (the past has none); the third is submitted
like any job and runs once the worker and the web are up. Safe to run twice: jobs of these
names already there are left as they are."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError

from instances import services
from instances.models import Instance, InstanceType, Job
from instances.providers.simulated import SimulatedProvider
from instances.services.jobs import (
    job_assignment,
    job_log_append,
    job_run_exited,
    job_run_started,
    job_scalars_record,
    job_submit,
)
from instances.services.queue import enqueue_held
from portal.lib.errors import PortalError
from portal.models import Project, User

KIND = "g5.xlarge"
# A training loop of the standard library (make run installs no TensorFlow): an "epoch" a few
# seconds, its state kept in $CHECKPOINT_DIR and resumed from there, SIGTERM saves and exits,
# its loss and accuracy written to $TENSORBOARD_LOG_DIR as TensorBoard's event files are.
TRAIN = r"""python3 - <<'PY'
import json, math, os, random, signal, struct, sys, time
ckpt = os.path.join(os.environ["CHECKPOINT_DIR"], "state.json")
os.makedirs(os.environ["CHECKPOINT_DIR"], exist_ok=True)
os.makedirs(os.environ["TENSORBOARD_LOG_DIR"], exist_ok=True)
def crc(data):  # CRC-32C, masked, as TFRecord frames carry it
    c = 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out
def field(number, wire, payload):
    return varint(number << 3 | wire) + (varint(len(payload)) + payload if wire == 2 else payload)
run = os.environ["JOB_RECOVERY"]
events = open(os.path.join(os.environ["TENSORBOARD_LOG_DIR"], f"events.out.tfevents.{run}"), "ab")
def record(event):
    head = struct.pack("<Q", len(event))
    events.write(head + struct.pack("<I", crc(head)) + event + struct.pack("<I", crc(event)))
    events.flush()
record(field(1, 1, struct.pack("<d", time.time())) + field(3, 2, b"brain.Event:2"))
def scalar(tag, step, value):
    item = field(1, 2, tag.encode()) + field(2, 5, struct.pack("<f", value))
    when = field(1, 1, struct.pack("<d", time.time()))
    record(when + field(2, 0, varint(step)) + field(5, 2, field(1, 2, item)))
state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"epoch": 0}
epochs = int(os.environ.get("EPOCHS", "200"))
print(f"recovery {run}: starting at epoch {state['epoch'] + 1} of {epochs}", flush=True)
def save(*_):
    json.dump(state, open(ckpt, "w"))
    print(f"checkpoint saved at epoch {state['epoch']}", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
while state["epoch"] < epochs:
    time.sleep(float(os.environ.get("EPOCH_SECONDS", "6")))
    state["epoch"] += 1
    e = state["epoch"]
    loss = 2.3 * math.exp(-e / 40) + random.uniform(0, 0.05)
    print(f"epoch {e}/{epochs} - loss {loss:.4f} - accuracy {1 - loss / 2.5:.4f}", flush=True)
    scalar("train/epoch_loss", e, loss)
    scalar("train/epoch_accuracy", e, 1 - loss / 2.5)
    json.dump(state, open(ckpt, "w"))
print("training finished", flush=True)
PY"""

PLAYED_OK = "vit-small-cifar"
PLAYED_FAILED = "bert-base-sweep"
RUNNING = "resnet50-imagenet"


def curves(epochs) -> list[dict]:
    """The loss and accuracy of these epochs, as the agent reads them from event files."""
    points = []
    for epoch in epochs:
        loss = 2.3 * 0.93**epoch
        for tag, value in (("train/epoch_loss", loss), ("train/epoch_accuracy", 1 - loss / 2.5)):
            points.append({"tag": tag, "step": epoch, "value": value, "wall_time": 0.0})
    return points


def _epochs(first: int, last: int, of: int) -> bytes:
    lines = []
    for epoch in range(first, last + 1):
        loss = 2.3 * 0.93**epoch
        lines.append(f"epoch {epoch}/{of} - loss {loss:.4f} - accuracy {1 - loss / 2.5:.4f}")
    return ("\n".join(lines) + "\n").encode()


class Player:
    """A host's agent, played: what it would send, through the services it calls."""

    def __init__(self, provider: SimulatedProvider):
        self.provider = provider

    def boot(self, job: Job, held: list) -> Instance:
        held.clear()
        host = job.order.instances.filter(status=Instance.Status.REQUESTED).latest("created_at")
        return services.instance_provision(instance_id=host.pk, provider=self.provider)

    def run(self, host: Instance, output: bytes, epochs=(), **exit_fields) -> Job:
        assignment = job_assignment(host=host)
        ref = {"host": host, "job_id": assignment.job.pk, "number": assignment.run.number}
        job_run_started(**ref, pid=4000 + assignment.run.number)
        job_log_append(**ref, offset=0, data=output)
        job_scalars_record(**ref, points=curves(epochs))
        return job_run_exited(**ref, **exit_fields)

    def end_hosts(self, job: Job) -> None:
        for host in job.order.instances.filter(status=Instance.Status.TERMINATING):
            services.instance_cloud_action(
                instance_id=host.pk, action="terminate", provider=self.provider
            )


def seed_demo_jobs() -> str:
    """Create the demo's three jobs (see the module's docstring); say what was done, or why
    not (a limit of vision-lab's refused them: the demo still opens)."""
    try:
        return _seed()
    except (PortalError, ValidationError) as error:
        return f"Jobs: not seeded ({getattr(error, 'message', None) or error})."


def _seed() -> str:
    project = Project.objects.get(slug="vision-lab")
    kind = InstanceType.objects.offered().filter(name=KIND).first()
    images = kind.compatible_images() if kind else []
    if not images:
        return f"Jobs: skipped ({KIND} or an image for it is not in the catalog)."
    alice = User.objects.get(username="alice")
    names = set(Job.objects.filter(project=project).values_list("name", flat=True))
    common = {"requester": alice, "project": project, "instance_type": kind, "image": images[0]}
    provider = SimulatedProvider()
    provider.agents, provider.boot = False, timedelta(0)
    player = Player(provider)
    made = []
    with enqueue_held() as held:
        if PLAYED_OK not in names:
            job = job_submit(
                **common, name=PLAYED_OK, market="spot", command=TRAIN, env={"EPOCHS": "30"}
            )
            first = player.boot(job, held)
            assignment = job_assignment(host=first)
            ref = {"host": first, "job_id": job.pk, "number": assignment.run.number}
            job_run_started(**ref, pid=4001)
            out = b"recovery 0: starting at epoch 1 of 30\n" + _epochs(1, 12, 30)
            job_log_append(**ref, offset=0, data=out + b"checkpoint saved at epoch 12\n")
            job_scalars_record(**ref, points=curves(range(1, 13)))
            provider.warn(first.cloud_id)
            services.spot_events_drain(provider=provider)
            job_run_exited(**ref, exit_code=143, signal="", stopped=True)
            provider.interrupt(first.cloud_id)
            second = player.boot(job, held)
            out = b"recovery 1: starting at epoch 13 of 30\n" + _epochs(13, 30, 30)
            player.run(second, out + b"training finished\n", range(13, 31), exit_code=0)
            player.end_hosts(job)
            made.append(f"{PLAYED_OK} (recovered once)")
        if PLAYED_FAILED not in names:
            job = job_submit(
                **common,
                name=PLAYED_FAILED,
                market="spot",
                command="python3 sweep.py --lr 3e-3",
                keep_host_minutes=0,
            )
            host = player.boot(job, held)
            out = (
                _epochs(1, 3, 10)
                + b'Traceback (most recent call last):\n  File "sweep.py", line 88, in <module>\n'
                + b'    raise FloatingPointError(f"loss is {loss}")\n'
                + b"FloatingPointError: loss is nan\n"
            )
            player.run(host, out, range(1, 4), exit_code=1)
            player.end_hosts(job)
            made.append(f"{PLAYED_FAILED} (failed)")
    if RUNNING not in names:
        # Submitted like any job: the worker launches its host and the host's agent runs it.
        job_submit(
            **common,
            name=RUNNING,
            market="spot",
            command=TRAIN,
            env={"EPOCHS": "600", "EPOCH_SECONDS": "6"},
            time_limit_minutes=24 * 60,
        )
        made.append(f"{RUNNING} (runs once the worker is up)")
    return f"Jobs in vision-lab: {', '.join(made) if made else 'already there'}."
