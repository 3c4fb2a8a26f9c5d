"""Webhooks on a real worker, on PostgreSQL and Redis: a worker SIGKILLed while its receiver
is still answering leaves nothing undelivered; the next worker sends the killed attempts again
with the same webhook-id (at least once, never lost). ``pytest -s`` prints the figures."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction

from portal.models import Membership, User, WebhookDelivery
from portal.services import membership_set, user_upsert, webhook_create, webhook_emit
from tests.workers import wait_for

pytestmark = [
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.real_clock,
]
EVENTS = 6
ENV = {"PORTAL_WEBHOOK_SECONDS": "1", "PORTAL_WEBHOOK_TIMEOUT_SECONDS": "1"}


class SlowReceiver:
    """Answers 200, but only after ``delay`` seconds; counts the requests in flight."""

    def __init__(self, delay: float):
        self.delay = delay
        self.ids: list[str] = []
        self.in_flight = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    receiver.ids.append(self.headers["webhook-id"])
                    receiver.in_flight += 1
                time.sleep(receiver.delay)
                with lock:
                    receiver.in_flight -= 1
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the worker that asked is gone

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_worker_killed_mid_delivery_loses_no_event_and_keeps_its_id(worker_process, projects):
    manager, _ = user_upsert(username="mia", role=User.Role.RESEARCHER, password="x" * 12)
    membership_set(project=projects["vision-lab"], user=manager, role=Membership.Role.MANAGER)
    receiver = SlowReceiver(delay=0.5)
    try:
        webhook_create(
            actor=manager, project=projects["vision-lab"], url=receiver.url, events=["host.failed"]
        )
        first = worker_process(beat=True, **ENV)
        with transaction.atomic():
            for n in range(EVENTS):
                webhook_emit(
                    project_id=projects["vision-lab"].pk, event="host.failed", data={"n": n}
                )
        wait_for(lambda: receiver.in_flight > 0, timeout=30)
        first.kill()
        killed_mid = set(receiver.ids)
        started = time.monotonic()
        worker_process(beat=True, **ENV)
        rows = WebhookDelivery.objects.all()

        def all_delivered():
            """every delivery delivered"""
            return rows.filter(status=WebhookDelivery.Status.DELIVERED).count() == EVENTS

        wait_for(all_delivered, timeout=60)
        settled = time.monotonic() - started
        ids = set(rows.values_list("message_id", flat=True))
        assert set(receiver.ids) == ids  # each event reached the receiver
        again = [i for i in ids if receiver.ids.count(i) > 1]
        # What the killed worker was sending came again, under the same id.
        assert killed_mid & set(again)
        print(
            f"\n{EVENTS} events, worker killed with {len(killed_mid)} sent: all delivered "
            f"{settled:.1f} s later, {len(again)} of them twice (same webhook-id)"
        )
    finally:
        receiver.close()
