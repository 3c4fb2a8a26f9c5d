#!/usr/bin/env python3
"""GPU Portal notebook agent: serves the host's JupyterLab while someone has it open in the
portal, and only then.

cloud-init installs it beside the telemetry and job agent (instances/lib/agent.py) as a
service of its own, with the same credential. Every few seconds it asks the portal what to
serve (``/api/v1/instances/<host>/agent/notebook/``): a token, the path (the portal's own
``/notebook/<host>/``, so that the portal's proxy passes paths through unchanged) and the port.
It starts ``jupyter lab`` for the host's login user on that port, restarts it when the token
changes (a notebook opened again), and stops it, kernels and all, when the portal says none is
open. The token reaches JupyterLab in its environment, never on a command line other users of
the host could read. While the portal is unreachable it leaves things as they are. It runs on
the host's python3 (3.9 or later) with the standard library only.
"""

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

STATE = "/var/lib/portal-agent/notebook.json"
TERMINATING = []


class Ended(Exception):
    """The portal no longer knows this host (401, 403, 404)."""


def wanted(env):
    """What the portal wants served: a dict, None for nothing, or ``...`` when it cannot say."""
    url = env["PORTAL_AGENT_URL"].rstrip("/")
    request = urllib.request.Request(
        f"{url}/api/v1/instances/{env['PORTAL_INSTANCE_ID']}/agent/notebook/",
        headers={"Authorization": "Agent " + env["PORTAL_AGENT_TOKEN"]},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read()
            return json.loads(text.decode()) if reply.status == 200 else None
    except urllib.error.HTTPError as error:
        if error.code in (401, 403, 404):
            raise Ended(error.code) from None
        return ...
    except (OSError, ValueError):
        return ...


def alive(served):
    if not served:
        return False
    if "process" in served:  # started by this agent: reaped here, never a zombie
        return served["process"].poll() is None
    try:
        os.kill(served["pid"], 0)
    except OSError:
        return False
    return True


def stop(served, path):
    """Stop the server's whole process group (its kernels too)."""
    # A group that is gone already (ESRCH) between the checks has nothing left to stop.
    with contextlib.suppress(ProcessLookupError):
        if alive(served):
            os.killpg(served["pid"], signal.SIGTERM)
            for _ in range(50):
                time.sleep(0.1)
                if not alive(served):
                    break
            else:
                os.killpg(served["pid"], signal.SIGKILL)
    if os.path.exists(path):
        os.remove(path)


def start(spec, env, path):
    user = env.get("PORTAL_AGENT_NOTEBOOK_USER", "")
    home = pwd.getpwnam(user).pw_dir if user else env.get("HOME", "/")
    variables = dict(os.environ, JUPYTER_TOKEN=spec["token"])
    for name in ("PORTAL_AGENT_TOKEN", "PORTAL_AGENT_URL"):
        variables.pop(name, None)  # the host's credential is the agent's, not the notebook's
    if user:
        variables.update(HOME=home, USER=user, LOGNAME=user)
    # Every address of the host by default: the portal's proxy reaches it at the private one.
    ip = env.get("PORTAL_AGENT_NOTEBOOK_IP", "0.0.0.0")  # noqa: S104
    command = [
        *env.get("PORTAL_AGENT_JUPYTER", "jupyter lab").split(),
        "--no-browser",
        "--ip=" + ip,
        "--port=" + str(int(spec["port"])),
        "--port-retries=0",
        "--ServerApp.base_url=" + spec["base_url"],
        "--ServerApp.root_dir=" + home,
        "--LabApp.news_url=None",
    ]
    child = subprocess.Popen(
        command,
        env=variables,
        cwd=home,
        user=user or None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    served = {"pid": child.pid, "token": spec["token"]}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as state:
        json.dump(served, state)
    return dict(served, process=child)


def load(path):
    try:
        with open(path) as state:
            served = json.load(state)
    except (OSError, ValueError):
        return None
    return served if isinstance(served, dict) and alive(served) else None


def main():
    env = os.environ
    path = env.get("PORTAL_AGENT_NOTEBOOK_STATE", STATE)
    poll = float(env.get("PORTAL_AGENT_POLL_SECONDS", 5))
    signal.signal(signal.SIGTERM, lambda *_: TERMINATING.append(True))
    served = load(path)  # a server the agent before this one started: kept if still wanted
    while not TERMINATING:
        try:
            spec = wanted(env)
        except Ended:
            stop(served, path)
            print("the portal no longer knows this host; the notebook agent stops", file=sys.stderr)
            return
        if spec is None:
            stop(served, path)
            served = None
        elif spec is not ... and (not alive(served) or served["token"] != spec["token"]):
            stop(served, path)
            served = start(spec, env, path)
        end = time.monotonic() + poll
        while not TERMINATING and time.monotonic() < end:
            time.sleep(0.1)
    # Stopped by systemd (a restart of the agent): the server runs on for the next agent.


if __name__ == "__main__":
    main()
