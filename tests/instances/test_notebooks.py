"""JupyterLab on a host, through the portal: a real JupyterLab on a simulated host, the portal
served by uvicorn (ASGI) as in production, a Python cell run over the kernel's websocket, and
everyone who may not act on the host kept out, by HTTP and by websocket alike."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import tracemalloc
import uuid
from datetime import UTC, datetime

import httpx
import pytest
import websockets
from django.test import Client
from websockets.sync.client import connect

from audit.models import AuditEvent
from instances import services
from instances.models import Notebook
from instances.providers.simulated_agents import host_agents

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def notebook_host(settings, running_host, alice):
    """alice's running host with its JupyterLab started, as the worker starts it."""
    settings.PORTAL_SIMULATED_AGENTS = True
    instance = running_host()
    notebook = services.notebook_open(instance=instance, actor=alice)
    notebook = services.notebook_launch(notebook_id=notebook.pk)
    assert notebook.status == Notebook.Status.RUNNING, notebook.reason
    yield instance
    host_agents().notebook_end(instance.pk)


def session_of(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def as_user(server: str, user) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://{server}",
        cookies={"sessionid": session_of(user)},
        headers={"Origin": f"http://{server}"},
        timeout=30,
    )


def execute(code: str) -> dict:
    session = uuid.uuid4().hex
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "alice",
            "session": session,
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False},
        "channel": "shell",
    }


def run_cell(url: str, headers: dict, code: str) -> str:
    """Run ``code`` on the kernel behind ``url`` and return what it printed. (websockets' sync
    client: a browser test's Playwright may hold this thread's event loop.)"""
    with connect(url, additional_headers=headers, open_timeout=20) as socket_:
        request = execute(code)
        socket_.send(json.dumps(request))
        printed = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = json.loads(socket_.recv(timeout=deadline - time.monotonic()))
            if message.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
                continue
            if message["msg_type"] == "stream":
                printed += message["content"]["text"]
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return printed
    return printed


def test_a_cell_runs_on_the_hosts_kernel_through_the_portal(portal_asgi, notebook_host, alice):
    base = f"/notebook/{notebook_host.pk}/"
    with as_user(portal_asgi, alice) as api:
        assert api.get(f"{base}api/status").status_code == 200
        lab = api.get(f"{base}lab")
        assert lab.status_code == 200 and "jupyter-config-data" in lab.text
        assert "set-cookie" not in lab.headers, "the host sets no cookie on the portal's domain"
        kernel = api.post(f"{base}api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        kernel_id = kernel.json()["id"]
    url = f"ws://{portal_asgi}{base}api/kernels/{kernel_id}/channels"
    headers = {"Cookie": f"sessionid={session_of(alice)}", "Origin": f"http://{portal_asgi}"}
    assert run_cell(url, headers, "print(6 * 7)") == "42\n"


def test_a_notebook_past_the_apis_body_limit_is_saved_and_read_back(
    portal_asgi, notebook_host, alice, settings
):
    """A notebook saved with its plots is megabytes: the proxy takes up to
    PORTAL_NOTEBOOK_MAX_BODY_BYTES (not the API's 1 MB), and refuses more with a 413 that
    says the limit, before anything reads it."""
    settings.PORTAL_NOTEBOOK_MAX_BODY_BYTES = 4 * 1024 * 1024
    plot = "iVBORw0KGgo" * (3 * 1024 * 1024 // 11)  # a PNG's worth of base64, 3 MB
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "plot",
                "metadata": {},
                "outputs": [
                    {
                        "data": {"image/png": plot, "text/plain": ["<Figure>"]},
                        "metadata": {},
                        "output_type": "display_data",
                    }
                ],
                "source": ["plt.plot(losses)"],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    url = f"/notebook/{notebook_host.pk}/api/contents/losses.ipynb"
    body = {"type": "notebook", "format": "json", "content": notebook}
    with as_user(portal_asgi, alice) as api:
        saved = api.put(url, json=body)
        assert saved.status_code in (200, 201), saved.text[:300]
        back = api.get(url, params={"content": 1})
        assert back.status_code == 200
        outputs = back.json()["content"]["cells"][0]["outputs"]
        assert outputs[0]["data"]["image/png"] == plot
        body["content"]["cells"][0]["outputs"][0]["data"]["image/png"] = plot * 2
        refused = api.put(url, json=body)
        assert refused.status_code == 413
        assert "at most 4194304 bytes in a request to a host's JupyterLab" in refused.text
        # The saved notebook is the 3 MB one still.
        assert len(api.get(url, params={"content": 1}).content) < 4 * 1024 * 1024


def test_a_checkpoint_goes_up_and_down_in_chunks_never_whole_in_the_portal(
    portal_asgi, notebook_host, alice
):
    """48 MiB down from the host and 24 MiB up (32 MiB of JSON) through the proxy: the
    portal (uvicorn in this process) never holds either whole. Read whole (before), the
    peaks were 98 and 86 MiB; streamed, 10 and 5."""
    base = f"/notebook/{notebook_host.pk}/"
    chunk = hashlib.sha256(b"weights").digest() * 2048  # 64 KB
    (host_agents().folder(notebook_host.pk) / "home/checkpoint.bin").write_bytes(chunk * 768)
    upload = base64.b64encode(chunk * 384)
    head, tail = b'{"type": "file", "format": "base64", "content": "', b'"}'

    def body():
        yield head
        for at in range(0, len(upload), len(chunk)):
            yield upload[at : at + len(chunk)]
        yield tail

    length = len(head) + len(upload) + len(tail)
    with as_user(portal_asgi, alice) as api:
        tracemalloc.start()
        try:
            digest = hashlib.sha256()
            with api.stream("GET", f"{base}files/checkpoint.bin") as reply:
                assert reply.status_code == 200
                for part in reply.iter_bytes():
                    digest.update(part)
            down_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            saved = api.put(
                f"{base}api/contents/uploaded.bin",
                content=body(),
                headers={"Content-Type": "application/json", "Content-Length": str(length)},
            )
            up_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert saved.status_code in (200, 201), saved.text[:300]
        back = api.get(f"{base}files/uploaded.bin")
    assert digest.hexdigest() == hashlib.sha256(chunk * 768).hexdigest()
    assert hashlib.sha256(back.content).digest() == hashlib.sha256(chunk * 384).digest()
    print(
        f"\nportal's peak: {down_peak / 2**20:.1f} MiB for 48 MiB down, "
        f"{up_peak / 2**20:.1f} MiB for 32 MiB up"
    )
    assert down_peak < 16 * 2**20, f"{down_peak / 2**20:.1f} MiB held for a 48 MiB download"
    assert up_peak < 16 * 2**20, f"{up_peak / 2**20:.1f} MiB held for a 32 MiB upload"


@pytest.mark.parametrize("who", ["bob", "carol", "fin"])
def test_everyone_who_may_not_act_on_the_host_gets_a_404(
    portal_asgi, notebook_host, bob, carol, fin, who
):
    user = {"bob": bob, "carol": carol, "fin": fin}[who]
    with as_user(portal_asgi, user) as api:
        assert api.get(f"/notebook/{notebook_host.pk}/api/status").status_code == 404
        assert api.get(f"/notebook/{notebook_host.pk}/lab").status_code == 404
    url = f"ws://{portal_asgi}/notebook/{notebook_host.pk}/api/events/subscribe"
    headers = {"Cookie": f"sessionid={session_of(user)}", "Origin": f"http://{portal_asgi}"}
    with pytest.raises(websockets.InvalidStatus) as refusal:
        _open(url, headers)
    assert refusal.value.response.status_code == 403


def test_another_site_cannot_post_or_open_a_websocket_as_the_owner(
    portal_asgi, notebook_host, alice
):
    base = f"/notebook/{notebook_host.pk}/"
    with as_user(portal_asgi, alice) as api:
        refused = api.post(
            f"{base}api/kernels",
            json={"name": "python3"},
            headers={"Origin": "https://evil.example"},
        )
        assert refused.status_code == 403
        assert api.get(f"{base}api/kernels").json() == []
    url = f"ws://{portal_asgi}{base}api/events/subscribe"
    headers = {"Cookie": f"sessionid={session_of(alice)}", "Origin": "https://evil.example"}
    with pytest.raises(websockets.InvalidStatus) as refusal:
        _open(url, headers)
    assert refusal.value.response.status_code == 403


def test_opening_it_is_an_audit_row_and_stopping_the_host_ends_it(notebook_host, alice, client):
    client.force_login(alice)
    reply = client.post(f"/hosts/{notebook_host.pk}/notebook/")
    assert reply.status_code == 302
    assert AuditEvent.objects.filter(path=f"/hosts/{notebook_host.pk}/notebook/").exists()
    assert Notebook.objects.filter(instance=notebook_host).count() == 1, "the same one, reopened"
    # Opening the lab (Open JupyterLab's link, a GET) is a row; the lab's own API reads are not.
    base = f"/notebook/{notebook_host.pk}/"
    assert client.get(f"{base}lab").status_code == 200
    assert client.get(f"{base}api/status").status_code == 200
    # Single-document mode shows the same lab.
    assert client.get(f"{base}doc/tree/notes.ipynb").status_code == 200
    opened = AuditEvent.objects.filter(path__startswith=base).order_by("seq")
    assert list(opened.values_list("method", "path", "actor_username")) == [
        ("GET", f"{base}lab", "alice"),
        ("GET", f"{base}doc/tree/notes.ipynb", "alice"),
    ]
    services.instance_request_stop(instance=notebook_host, user=alice)
    notebook_host.refresh_from_db()
    assert services.live_notebook(notebook_host) is None
    assert Notebook.objects.get(instance=notebook_host).status == Notebook.Status.ENDED


def _open(url: str, headers: dict) -> None:
    """Open the websocket; a refusal raises InvalidStatus, which the tests expect."""
    with connect(url, additional_headers=headers, open_timeout=10) as opened:
        raise AssertionError(f"the websocket opened ({opened.response.status_code})")
