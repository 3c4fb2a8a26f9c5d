"""A fake portal for the host agent's job mode (and a fake IMDS): small HTTP servers in the
test's own process that record every request and answer as each test scripts them, and the
helpers the agent tests share to watch processes."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests import workers


class Recorder(ThreadingHTTPServer):
    """A server on 127.0.0.1, port 0, answering in a thread of this process."""

    daemon_threads = True

    def __init__(self, answer):
        self.answer, self.requests, self.lock = answer, [], threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_any(self):
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                with server.lock:
                    server.requests.append((self.command, self.path, dict(self.headers), body))
                    status, reply = server.answer(self.command, self.path, self.headers, body)
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(0 if status == 204 else len(data)))
                self.end_headers()
                if status != 204:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_any

            def log_message(self, *args):
                pass

        server = self
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def close(self):
        self.shutdown()
        self.server_close()


class FakePortal:
    """The portal's job API: hands out ``jobs`` in turn (then 204), keeps the log it was sent,
    and answers ``stop``, ``refuse`` (a status for everything), ``cap_at``, ``lose_once``."""

    def __init__(self):
        self.jobs, self.log, self.exits, self.started = [], bytearray(), [], []
        self.stop, self.refuse, self.cap_at, self.lose_once = False, None, None, None
        self.status = {}  # endpoint -> a status to answer there instead
        self.server = Recorder(self.answer)
        self.url = self.server.url

    def answer(self, method, path, headers, body):
        if self.refuse:
            return self.refuse, {"code": "refused"}
        endpoint = path.rsplit("/job/", 1)[1].strip("/") or "job"
        if endpoint in self.status:
            return self.status[endpoint], {"code": "conflict"}
        data = json.loads(body) if body else None
        if endpoint == "job":
            return (200, self.jobs.pop(0)) if self.jobs else (204, b"")
        if endpoint == "started":
            self.started.append(data)
        if endpoint == "exit":
            self.exits.append(data)
        if endpoint == "log":
            return 200, self.took_log(data)
        return 200, {"stop": self.stop}

    def took_log(self, data):
        offset, chunk = data["offset"], base64.b64decode(data["data"])
        if offset <= len(self.log):
            self.log += chunk[len(self.log) - offset :]
        capped = self.cap_at is not None and len(self.log) >= self.cap_at
        if capped:
            del self.log[self.cap_at :]
        if self.lose_once and len(self.log) >= self.lose_once:
            del self.log[self.lose_once // 2 :]  # as if a write was lost: ask for it again
            self.lose_once = None
        return {"offset": len(self.log), "stop": self.stop, "capped": capped}

    def posts(self, endpoint):
        return [
            json.loads(body)
            for method, path, _, body in self.server.requests
            if method == "POST" and path.endswith(f"/job/{endpoint}/")
        ]


def wait_for(predicate, timeout=10.0):
    """As tests.workers.wait_for, every 0.05 s, with a file not written yet as "not yet"."""
    return workers.wait_for(predicate, timeout, every=0.05, tolerate=(OSError,))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


@pytest.fixture
def portal():
    """A fake portal for one test (tests/instances/conftest.py shares it)."""
    fake = FakePortal()
    yield fake
    fake.server.close()
