#!/usr/bin/env python3
"""GPU Portal host agent: the minute's telemetry reading, and (``portal_agent.py jobs``) the
managed training jobs the portal hands this host.

cloud-init installs this file as /usr/local/bin/portal-gpu-agent with the host's own credential
(instances/lib/agent.py; the credential is instances/services/telemetry.py's agent_secret) and a
systemd timer runs it every minute. It reads each GPU from nvidia-smi (the host's totals beside
each GPU's own), keeps the readings in a spool until the portal accepts them, and drops (with a
line in the journal) only the readings the portal refused as malformed, posting the rest again:
nothing is lost without a word on either side. It runs on the host's python3 (3.8 or later)
with the standard library only.

``jobs``, a service of its own (instances/lib/agent.py), asks the portal for the run to run,
puts its working folder in place (workdir.py), runs it in its own process group with its log on
disk, sends the log bytes and TensorBoard scalars (tfevents.py) the portal lacks, stops it (its
stop signal, its grace, then SIGKILL) when the portal, IMDS or systemd says so, and reports its
exit until the portal has it. Each run's state is in its folder (job.pid, exit-<run>.json): a
restarted agent adopts a live run and re-sends a saved exit, and never runs a run twice."""

import base64
import contextlib
import datetime
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tfevents import Scalars
from workdir import prepare

SPOOL = "/var/lib/portal-agent/spool.jsonl"


def gpu_readings(out):
    """Each GPU's line of nvidia-smi's CSV as the portal's ``gpus`` item. A GPU that answers
    "[N/A]" or "[Unknown Error]" (one fallen off the bus, say) is left out with a line in the
    journal: the others still count, and the portal is told only what was read."""
    gpus = []
    for line in out.strip().splitlines():
        try:
            index, utilization, used, total = (int(value) for value in line.split(","))
        except ValueError:
            print("nvidia-smi gave an unreadable GPU line:", line.strip(), file=sys.stderr)
            continue
        gpus.append(
            dict(index=index, utilization=utilization, memory_used_mib=used, memory_total_mib=total)
        )
    return gpus


def reading_of(gpus, at):
    """The minute's reading: the GPUs' mean utilization and memory summed, each GPU's beside."""
    return {
        "at": at.isoformat(),
        "utilization": round(sum(gpu["utilization"] for gpu in gpus) / len(gpus)),
        "memory_used_mib": sum(gpu["memory_used_mib"] for gpu in gpus),
        "gpus": gpus,
    }


def main() -> None:
    url = os.environ["PORTAL_AGENT_URL"].rstrip("/")
    host = os.environ["PORTAL_INSTANCE_ID"]
    token = os.environ["PORTAL_AGENT_TOKEN"]
    spool_path = os.environ.get("PORTAL_AGENT_SPOOL", SPOOL)
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=index,utilization.gpu,memory.used,memory.total",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    gpus = gpu_readings(out)
    os.makedirs(os.path.dirname(spool_path), exist_ok=True)
    if gpus:
        reading = reading_of(gpus, datetime.datetime.now(datetime.timezone.utc))
        with open(spool_path, "a") as spool:
            spool.write(json.dumps(reading) + "\n")
    else:
        print("nvidia-smi listed no readable GPU; nothing read this minute", file=sys.stderr)
    if not os.path.exists(spool_path):
        return
    with open(spool_path) as spool:
        readings = [json.loads(line) for line in spool if line.strip()][-1440:]
    try:
        answer = post(url, host, token, readings)
        if answer is not None:
            # 400 names each refused reading ("readings.3.gpus.0.index"); the rest of the
            # batch was sound and is posted again without them.
            refused = refused_positions(answer)
            print("portal refused readings:", json.dumps(answer)[:2000], file=sys.stderr)
            kept = [reading for n, reading in enumerate(readings) if n not in refused]
            if refused and kept and post(url, host, token, kept) is not None:
                print("portal refused the rest too; dropped", file=sys.stderr)
    except urllib.error.HTTPError as error:
        sys.exit(f"portal answered {error.code}; {len(readings)} readings kept for later")
    except OSError as error:
        sys.exit(f"portal unreachable ({error}); {len(readings)} readings kept for later")
    os.remove(spool_path)


def post(url, host, token, readings):
    """POST the batch: None once stored, the 400's answer (a dict); else raise (spool kept)."""
    request = urllib.request.Request(
        f"{url}/api/v1/instances/{host}/metrics/",
        data=json.dumps({"readings": readings}).encode(),
        headers={"Authorization": f"Agent {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=20).close()
    except urllib.error.HTTPError as error:
        if error.code != 400:
            raise
        try:
            return json.loads(error.read().decode())
        except ValueError:
            return {}
    return None


def refused_positions(answer):
    """The positions in the batch a 400 names (its ``fields`` are "readings.N..." paths)."""
    positions = set()
    for name in answer.get("fields") or {}:
        parts = name.split(".")
        if len(parts) > 1 and parts[0] == "readings" and parts[1].isdigit():
            positions.add(int(parts[1]))
    return positions


# Managed training jobs: ``portal_agent.py jobs``.
WORKDIR = "/var/lib/portal-agent/jobs"
SYNCED = ("--include", "checkpoints/*", "--include", "tensorboard/*")  # kept in its s3:// URI
LOGS = ("--include", "run-*.log")  # uploaded too: a log past the portal's cap outlives the host
SYNC_ENV = ("PORTAL_CHECKPOINT_URI", "CHECKPOINT_DIR")
TERMINATING = []  # SIGTERM (systemd stopping the agent): stop the run gracefully, then exit
EXIT_KEYS = ("job", "run", "exit_code", "signal", "stopped", "interrupted")


class Ended(Exception):
    """The portal no longer knows this host (401, 403, 404): stop everything and exit 0."""


class Unreachable(Exception):
    """A network error, a 5xx or an unreadable answer: the portal is asked again later."""


class GaveUp(Exception):
    """The portal has been unreachable for PORTAL_AGENT_GIVE_UP_SECONDS."""


class Portal:
    """The portal's job API for this host, and how long it has been unreachable."""

    def __init__(self, env):
        url, host = env["PORTAL_AGENT_URL"].rstrip("/"), env["PORTAL_INSTANCE_ID"]
        self.base = f"{url}/api/v1/instances/{host}/job/"
        auth = "Agent " + env["PORTAL_AGENT_TOKEN"]
        self.headers = {"Authorization": auth, "Content-Type": "application/json"}
        self.give_up = float(env.get("PORTAL_AGENT_GIVE_UP_SECONDS", 900))
        self.down_since, self.failures = None, 0

    def call(self, path, body=None):
        """(status, answer) of a GET (no body) or a POST of ``body``."""
        request = urllib.request.Request(
            self.base + path,
            data=None if body is None else json.dumps(body).encode(),
            headers=self.headers,
            method="GET" if body is None else "POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                status, text = reply.status, reply.read()
            answer = json.loads(text.decode()) if text.strip() else {}
        except urllib.error.HTTPError as error:
            if error.code in (401, 403, 404):
                raise Ended(error.code) from None
            if error.code == 409:  # this run is no longer wanted
                return 409, {}
            self.failed(f"the portal answered {error.code}")
        except (OSError, ValueError, http.client.HTTPException) as error:
            self.failed(f"the portal is unreachable: {error!r}")
        self.down_since, self.failures = None, 0
        return status, answer if isinstance(answer, dict) else {}

    def failed(self, why):
        self.down_since = self.down_since or time.monotonic()
        self.failures += 1
        raise Unreachable(why)

    def gone(self):
        return self.down_since is not None and time.monotonic() - self.down_since >= self.give_up

    def gave_up(self):
        if TERMINATING:
            return "asked to stop while the portal is unreachable"
        return f"the portal has been unreachable for {self.give_up:.0f} s"

    def backoff(self):
        """Seconds to the next try: doubling up to 30, never past the moment to give up."""
        left = self.give_up - (time.monotonic() - (self.down_since or time.monotonic()))
        return max(0.1, min(30.0, 0.5 * 2 ** min(self.failures, 6), left))


def nap(seconds):  # a sleep that wakes when systemd asks the agent to stop
    end = time.monotonic() + seconds
    while not TERMINATING and time.monotonic() < end:
        time.sleep(max(0.0, min(0.1, end - time.monotonic())))


def retry(portal, send):
    """send() until the portal answers; GaveUp once it has been unreachable too long."""
    while True:
        try:
            return send()
        except Unreachable as error:
            if portal.gone() or TERMINATING:
                raise GaveUp(f"{portal.gave_up()} ({error})") from None
            nap(portal.backoff())


def started_at(pid):
    """/proc/<pid>/stat's start time (None: gone or a zombie): with the pid, a run's identity."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def read_json(path):
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def write(path, text):
    """Replace the file at once, so a crash leaves the old text or the new, never half."""
    with open(path + ".tmp", "w") as file:
        file.write(text)
    os.replace(path + ".tmp", path)


def spot_warned(imds):
    """Whether IMDS (v2) says the cloud is taking this spot host back."""
    ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
    try:
        ask = urllib.request.Request(imds + "/latest/api/token", headers=ttl, method="PUT")
        with urllib.request.urlopen(ask, timeout=2) as reply:
            token = {"X-aws-ec2-metadata-token": reply.read().decode()}
        action = imds + "/latest/meta-data/spot/instance-action"
        urllib.request.urlopen(urllib.request.Request(action, headers=token), timeout=2).close()
    except (OSError, ValueError):  # 404: no warning; no IMDS: none we could see
        return False
    return True


class Run:
    """A run on this host: its folder, its process (started or adopted), its log, its scalars."""

    def __init__(self, workdir, spec):
        self.spec, self.job, self.run = spec, str(spec["job"]), int(spec["run"])
        self.ids = {"job": self.job, "run": self.run}
        self.folder = os.path.join(workdir, self.job)
        self.log = os.path.join(self.folder, f"run-{self.run}.log")
        self.exit_path = os.path.join(self.folder, f"exit-{self.run}.json")
        env = spec.get("env") or {}
        uri = str(env.get("PORTAL_CHECKPOINT_URI", ""))
        self.uri = uri if uri.startswith("s3://") else ""
        self.upload = self.uri if int(spec.get("rank") or 0) == 0 else ""  # a cluster's chief
        self.checkpoints = os.path.join(self.folder, str(env.get("CHECKPOINT_DIR", "checkpoints")))
        self.scalars = Scalars(os.path.join(self.folder, str(env.get("TENSORBOARD_LOG_DIR", "tb"))))
        stop = str(spec.get("stop_signal"))
        self.stop_signal = signal.Signals.__members__.get(stop, signal.SIGTERM)
        self.grace = float(spec.get("grace_seconds", 30))
        self.proc = self.pid = self.start_time = self.syncing = None
        self.offset, self.capped = 0, False

    def start(self):
        os.makedirs(self.folder, exist_ok=True)
        # What a restarted agent needs to adopt or settle this run (not the user's variables).
        kept = {k: v for k, v in (self.spec.get("env") or {}).items() if k in SYNC_ENV}
        saved = dict(self.spec, env=kept, workdir=0)  # the working folder is in the folder
        write(os.path.join(self.folder, "job.json"), json.dumps(saved))
        env = dict(os.environ)
        env.pop("PORTAL_AGENT_TOKEN", None)  # the job must never act as the host
        env.update({str(k): str(v) for k, v in (self.spec.get("env") or {}).items()})
        for name in ("CHECKPOINT_DIR", "TENSORBOARD_LOG_DIR"):
            if name in env:
                env[name] = os.path.join(self.folder, env[name])
        open(self.log, "ab").close()  # from here on this run counts as started
        ready = prepare(self.spec.get("workdir"), self.folder, self.note)  # 125: not ready
        if self.uri:
            os.makedirs(self.checkpoints, exist_ok=True)
            self.sync(self.uri, self.folder, wait=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["sh", "-c", str(self.spec["command"]) if ready else "exit 125"],
                cwd=self.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.proc.pid
        pid_line = f"{self.pid} {started_at(self.pid)} {self.run}\n"
        write(os.path.join(self.folder, "job.pid"), pid_line)

    def adopt(self):
        """Take over this run's live process, left by an agent before this one."""
        try:
            with open(os.path.join(self.folder, "job.pid")) as file:
                pid, start, run = file.read().split()[:3]
        except (OSError, ValueError):
            return False
        if int(run) != self.run or started_at(int(pid)) != start:
            return False
        self.pid, self.start_time = int(pid), start
        self.offset = -1  # ask the portal how much of the log it has
        return True

    def alive(self):
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and started_at(self.pid) == self.start_time

    def signal(self, sig):
        with contextlib.suppress(OSError, TypeError):  # TypeError: no process, pid None
            os.killpg(self.pid, sig)  # start_new_session: its group is its pid

    def outcome(self):
        code = self.proc.returncode if self.proc is not None else None
        if code is not None and code < 0:
            return None, signal.Signals(-code).name
        return code, None

    def note(self, text):
        with open(self.log, "ab") as log:
            log.write(f"[portal-agent] {text}\n".encode())

    def sync(self, source, target, wait):
        try:
            only = [*SYNCED, *(LOGS if target == self.uri else ())]
            with open(self.log, "ab") as log:
                proc = subprocess.Popen(
                    ["aws", "s3", "sync", source, target, "--exclude", "*", *only],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
        except OSError as error:
            self.note(f"checkpoint sync {source} -> {target} failed: {error}")
            return
        self.syncing = (proc, source, target)
        self.synced(wait)

    def synced(self, wait=False):
        """Whether no checkpoint sync is running; one that ended failing is a line in the log."""
        if self.syncing is None:
            return True
        proc, source, target = self.syncing
        if proc.poll() is None and not wait:
            return False
        if proc.wait():
            self.note(f"checkpoint sync {source} -> {target} failed (exit {proc.wait()})")
        self.syncing = None
        return True

    def post_log(self, portal):
        """Send the next bytes of the log the portal lacks (none once it is capped or when
        asking how much it has, but the answer still says whether to stop)."""
        data = b""
        if not self.capped and self.offset >= 0:
            with open(self.log, "rb") as log:
                log.seek(self.offset)
                data = log.read(65536)
        body = dict(self.ids, offset=max(self.offset, 0), data=base64.b64encode(data).decode())
        status, answer = portal.call("log/", body)
        if status == 200:
            self.offset = int(answer.get("offset", max(self.offset, 0) + len(data)))
            self.capped = bool(answer.get("capped"))
            self.scalars.send(portal.call, self.ids)  # TensorBoard's, for the job's page
        return status, answer


def supervise(portal, run, imds, sync_every):
    """Watch the run to its end: send its log, stop it when asked (stop signal, grace, SIGKILL
    to its group), sync its folders, then settle its exit."""
    reason, kill_at, started = None, None, False
    next_post = next_imds = 0.0
    next_sync = time.monotonic() + sync_every
    while run.alive():
        now = time.monotonic()
        if TERMINATING and reason is None:
            reason = "agent stopped"
        if now >= next_post and reason not in ("ended", "gone"):
            try:
                if started:
                    status, answer = run.post_log(portal)
                else:
                    status, answer = portal.call("started/", dict(run.ids, pid=run.pid))
                    started = True
                if status == 409:
                    reason = reason or "unwanted"
                elif answer.get("stop"):
                    reason = reason or "portal"
                next_post = now + 1
            except Unreachable:
                reason = "gone" if portal.gone() else reason
                next_post = now + portal.backoff()
            except Ended:
                reason = "ended"
        if imds and reason is None and now >= next_imds:
            reason = "imds" if spot_warned(imds) else None
            next_imds = now + 5
        if run.upload and now >= next_sync and run.synced():
            run.sync(run.folder, run.uri, wait=False)
            next_sync = now + sync_every
        if reason and kill_at is None:
            run.signal(run.stop_signal)
            kill_at = now + run.grace
        elif kill_at is not None and now >= kill_at:
            run.signal(signal.SIGKILL)
        time.sleep(0.1)
    run.signal(signal.SIGKILL)  # whatever the run left behind in its group
    if not started and run.pid is not None and reason not in ("ended", "gone"):  # a short run
        status, _ = retry(portal, lambda: portal.call("started/", dict(run.ids, pid=run.pid)))
        reason = "unwanted" if status == 409 else reason
    if run.upload:
        run.synced(wait=True)
        run.sync(run.folder, run.uri, wait=True)
    code, sig = run.outcome()
    outcome = dict(run.ids, exit_code=code, signal=sig, stopped=reason is not None)
    outcome["interrupted"] = reason == "imds"
    # A run the portal no longer wants is settled without a report, and never run again.
    write(run.exit_path, json.dumps(dict(outcome, reported=reason == "unwanted")))
    if reason == "gone":
        run.note(f"{portal.gave_up()}; the run was stopped")
        raise GaveUp(f"{portal.gave_up()}; the run {run.job}/{run.run} was stopped")
    if reason == "ended":
        raise Ended()
    if reason != "unwanted":
        for _ in range(os.path.getsize(run.log) // 65536 + 20):  # bounded: a portal may stall
            if run.capped or 0 <= os.path.getsize(run.log) <= run.offset:
                break
            if retry(portal, lambda: run.post_log(portal))[0] != 200:
                break  # 409: the portal wants no more of this run
        report_exit(portal, run, outcome)


def report_exit(portal, run, outcome):
    outcome = {key: outcome.get(key) for key in EXIT_KEYS}
    retry(portal, lambda: portal.call("exit/", outcome))
    write(run.exit_path, json.dumps(dict(outcome, reported=True)))


def settle(portal, run, imds, sync_every, asked=False):
    """Bring the run to a reported end, never running it twice: a saved exit is sent (again,
    when asked for the run again), a live process adopted, a run that left neither (a reboot)
    reported as ended unknown; only a run ``asked`` for and never started here starts."""
    saved = read_json(run.exit_path)
    if saved is not None:
        if asked or not saved.get("reported"):
            report_exit(portal, run, saved)
    elif run.adopt() or os.path.exists(run.log):
        supervise(portal, run, imds, sync_every)
    elif asked:
        run.start()
        supervise(portal, run, imds, sync_every)


def jobs():
    portal, env = Portal(os.environ), os.environ
    workdir = env.get("PORTAL_AGENT_WORKDIR", WORKDIR)
    poll = float(env.get("PORTAL_AGENT_POLL_SECONDS", 5))
    imds = env.get("PORTAL_AGENT_IMDS_URL", "").rstrip("/")
    sync_every = float(env.get("PORTAL_AGENT_SYNC_SECONDS", 60))
    signal.signal(signal.SIGTERM, lambda *_: TERMINATING.append(True))
    os.makedirs(workdir, exist_ok=True)
    try:
        for job in sorted(os.listdir(workdir)):  # what an agent before this one left
            saved = read_json(os.path.join(workdir, job, "job.json"))
            if isinstance(saved, dict) and "run" in saved:
                settle(portal, Run(workdir, saved), imds, sync_every)
        while not TERMINATING:
            try:
                status, spec = portal.call("")
            except Unreachable:
                if portal.gone():
                    raise GaveUp(portal.gave_up()) from None
                nap(portal.backoff())
                continue
            if status == 200 and spec.get("job"):
                settle(portal, Run(workdir, spec), imds, sync_every, asked=True)
            nap(poll)
    except Ended:
        print("the portal no longer knows this host; the agent stops", file=sys.stderr)
    except GaveUp as error:
        sys.exit(f"{error}; the agent gives up, its runs' exits are kept in {workdir}")


if __name__ == "__main__":
    jobs() if sys.argv[1:] == ["jobs"] else main()
