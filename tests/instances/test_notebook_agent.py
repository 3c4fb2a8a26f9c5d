"""The notebook agent an EC2 host runs (instances/agent/portal_notebook_agent.py), run as a
host runs it: its own process, asking the portal (uvicorn, as in production) with the host's
own credential. It starts a real JupyterLab when someone opens the host's notebook, the
portal's proxy reaches it, and it stops the server, kernels and all, once the notebook is
closed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from instances import services
from instances.models import HostAgentCredential, Notebook
from instances.services.telemetry import agent_credential_issue
from tests.instances.test_notebooks import as_user

pytestmark = [pytest.mark.django_db(transaction=True)]
AGENT = Path(__file__).resolve().parents[2] / "instances" / "agent" / "portal_notebook_agent.py"
JUPYTER = (
    f"{sys.executable} -m jupyterlab --allow-root "
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate "
    "--LabApp.extension_manager=readonly"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def status(port: int, base: str, token: str | None) -> int | None:
    """What the JupyterLab on the port answers for its status, or None while nothing listens."""
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        return httpx.get(f"http://127.0.0.1:{port}{base}api/status", headers=headers).status_code
    except httpx.TransportError:
        return None


def waited(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.25)
    return False


@pytest.fixture
def agent(portal_asgi, tmp_path):
    started: list[subprocess.Popen] = []

    def start(instance) -> subprocess.Popen:
        home = tmp_path / "home"
        news = home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension"
        news.mkdir(parents=True, exist_ok=True)
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}\n')
        variables = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "PORTAL_AGENT_URL": f"http://{portal_asgi}",
            "PORTAL_INSTANCE_ID": str(instance.pk),
            "PORTAL_AGENT_TOKEN": agent_credential_issue(instance=instance),
            "PORTAL_AGENT_POLL_SECONDS": "0.3",
            "PORTAL_AGENT_NOTEBOOK_IP": "127.0.0.1",
            "PORTAL_AGENT_NOTEBOOK_STATE": str(tmp_path / "notebook.json"),
            "PORTAL_AGENT_JUPYTER": JUPYTER,
        }
        proc = subprocess.Popen(
            [sys.executable, str(AGENT)],
            env=variables,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    state = tmp_path / "notebook.json"
    if state.exists():  # a server the agent left: never past the test
        pid = int(state.read_text().split('"pid": ')[1].split(",")[0])
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def test_the_agent_serves_the_open_notebook_to_the_proxy_and_stops_it_when_closed(
    agent, portal_asgi, running_host, alice, settings, tmp_path
):
    settings.PORTAL_NOTEBOOK_PORT = port = free_port()
    instance = running_host()
    base = services.notebook_base_url(instance)
    proc = agent(instance)
    time.sleep(1.5)  # several questions answered 204: nothing is served yet
    assert status(port, base, None) is None
    notebook = Notebook.objects.create(instance=instance, started_by=alice, token="tok-" * 8)
    assert waited(lambda: status(port, base, notebook.token) == 200, 60), proc.stderr
    assert status(port, base, None) == 403, "JupyterLab asks for its token"
    # What the worker records once it answers (on EC2: the host's private address).
    Notebook.objects.filter(pk=notebook.pk).update(
        status=Notebook.Status.RUNNING, address=f"127.0.0.1:{port}"
    )
    with as_user(portal_asgi, alice) as api:
        assert api.get(f"{base}api/status").status_code == 200
        assert api.post(f"{base}api/kernels", json={"name": "python3"}).status_code == 201
    services.notebook_close(instance=instance, actor=alice)
    assert waited(lambda: status(port, base, notebook.token) is None, 20)
    assert waited(lambda: not (tmp_path / "notebook.json").exists(), 10), "its record goes"
    assert proc.poll() is None, "the agent goes on asking"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_the_agent_stops_for_good_when_the_portal_no_longer_knows_its_host(agent, running_host):
    instance = running_host()
    proc = agent(instance)
    time.sleep(1)
    HostAgentCredential.objects.filter(instance=instance).delete()  # as when the host ends
    assert proc.wait(20) == 0
    assert b"no longer knows this host" in proc.stderr.read()
