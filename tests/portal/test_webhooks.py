"""Webhooks: a project's managers register endpoints, the portal POSTs the events they chose,
signed the Standard Webhooks way, to a real receiver on 127.0.0.1 that checks the signature
with the standardwebhooks library's own verifier; retries, resends and rotations keep the
message id; private addresses are refused outside development."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError

from portal.models import Membership, User, Webhook, WebhookDelivery
from portal.services import (
    membership_set,
    user_upsert,
    webhook_create,
    webhook_deliver,
    webhook_emit,
    webhook_secret_rotate,
    webhooks_deliver_due,
)

pytestmark = pytest.mark.django_db
D = WebhookDelivery.Status


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that keeps what it is sent and answers ``status``."""

    def __init__(self):
        self.received: list[tuple[dict, bytes]] = []
        self.status = 204
        self.location = ""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/gpu"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


@pytest.fixture
def mia(projects):
    """vision-lab's manager."""
    user, _ = user_upsert(username="mia", role=User.Role.RESEARCHER, password="x" * 12)
    membership_set(project=projects["vision-lab"], user=user, role=Membership.Role.MANAGER)
    return user


def _hook(mia, projects, receiver, events=("order.placed",)) -> tuple[Webhook, str]:
    return webhook_create(
        actor=mia, project=projects["vision-lab"], url=receiver.url, events=list(events)
    )


def _deliver_all() -> list[WebhookDelivery]:
    return [
        webhook_deliver(delivery_id=pk)
        for pk in WebhookDelivery.objects.filter(status=D.PENDING).values_list("pk", flat=True)
    ]


# --- registering -----------------------------------------------------------------------------


def test_a_manager_registers_a_webhook_and_sees_its_secret_once(api_as, mia, projects):
    response = api_as(mia).post(
        "/api/v1/webhooks/",
        {
            "project": "vision-lab",
            "url": "https://hooks.example.org/gpu",
            "events": ["host.running", "order.placed", "host.running"],
            "description": "lab chat",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["host.running", "order.placed"]
    assert response["Location"] == f"/api/v1/webhooks/{body['id']}/"
    again = api_as(mia).get(f"/api/v1/webhooks/{body['id']}/").json()
    assert "secret" not in again and again["url"] == "https://hooks.example.org/gpu"
    # Kept encrypted: the secret is nowhere in the row.
    row = Webhook.objects.get()
    assert body["secret"] not in row.secret_encrypted


def test_a_member_who_does_not_manage_cannot_register_and_nothing_is_made(api_as, alice):
    response = api_as(alice).post(
        "/api/v1/webhooks/",
        {"project": "vision-lab", "url": "https://hooks.example.org/x", "events": ["order.placed"]},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    assert not Webhook.objects.exists()


def test_finance_registers_budget_events_only(api_as, fin, projects):
    body = {"project": "nlp-lab", "url": "https://finance.example.org/hook"}
    refused = api_as(fin).post(
        "/api/v1/webhooks/", {**body, "events": ["budget.threshold", "host.running"]}, format="json"
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden_event"
    assert "host.running" in refused.json()["detail"]
    made = api_as(fin).post(
        "/api/v1/webhooks/", {**body, "events": ["budget.threshold"]}, format="json"
    )
    assert made.status_code == 201


def test_another_projects_webhooks_are_not_found(api_as, mia, carol, projects, receiver):
    hook, _ = _hook(mia, projects, receiver)
    assert api_as(carol).get(f"/api/v1/webhooks/{hook.pk}/").status_code == 404
    assert api_as(carol).get("/api/v1/webhooks/").json()["results"] == []
    assert api_as(carol).delete(f"/api/v1/webhooks/{hook.pk}/").status_code == 404
    assert Webhook.objects.filter(pk=hook.pk).exists()
    # A project the caller cannot see is not confirmed to exist.
    response = api_as(carol).post(
        "/api/v1/webhooks/",
        {"project": "vision-lab", "url": "https://x.example.org/", "events": ["order.placed"]},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["fields"]["project"] == ["There is no project called vision-lab."]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": ["order.shipped"]}, "events.0"),
        ({"events": []}, "events"),
        ({"url": "hooks.example.org"}, "url"),
        ({"url": "https://" + "a" * 2000 + ".org/"}, "url"),
        ({"url": "https://user:pw@hooks.example.org/"}, "url"),
        ({"description": "x" * 201}, "description"),
        ({"secret": "whsec_mine"}, "secret"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_made(api_as, mia, body, field):
    base = {
        "project": "vision-lab",
        "url": "https://hooks.example.org/gpu",
        "events": ["order.placed"],
    }
    response = api_as(mia).post("/api/v1/webhooks/", base | body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"], response.json()
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.org/gpu",
        "https://127.0.0.1/gpu",
        "https://10.1.2.3/gpu",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/gpu",
        "https://localhost/gpu",
        "https://testserver/gpu",
    ],
)
def test_outside_development_private_addresses_and_plain_http_are_refused(
    api_as, mia, settings, url
):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    settings.ALLOWED_HOSTS = ["testserver", "gpu.example.org"]
    response = api_as(mia).post(
        "/api/v1/webhooks/",
        {"project": "vision-lab", "url": url, "events": ["order.placed"]},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "url_refused"
    assert not Webhook.objects.exists()


def test_a_project_holds_at_most_the_set_number(mia, projects, settings, receiver):
    settings.PORTAL_WEBHOOKS_PER_PROJECT = 2
    _hook(mia, projects, receiver)
    _hook(mia, projects, receiver)
    from portal.lib.errors import Conflict

    with pytest.raises(Conflict) as refused:
        _hook(mia, projects, receiver)
    assert refused.value.code == "too_many_webhooks"
    assert Webhook.objects.count() == 2


def test_a_patch_changes_only_what_it_names(api_as, mia, projects, receiver):
    hook, _ = _hook(mia, projects, receiver, events=("order.placed", "host.failed"))
    response = api_as(mia).patch(
        f"/api/v1/webhooks/{hook.pk}/", {"is_active": False}, format="json"
    )
    assert response.status_code == 200
    hook.refresh_from_db()
    assert hook.is_active is False
    assert hook.events == ["host.failed", "order.placed"] and hook.url == receiver.url


# --- delivering ------------------------------------------------------------------------------


def test_an_order_placed_reaches_the_receiver_signed(mia, projects, receiver, place_order, alice):
    _, secret = _hook(mia, projects, receiver)
    order = place_order(alice)
    [delivery] = _deliver_all()
    assert delivery.status == D.DELIVERED and delivery.response_status == 204
    [(headers, body)] = receiver.received
    message = Verifier(secret).verify(body, headers)
    assert message["type"] == "order.placed"
    assert message["data"]["order"]["id"] == str(order.pk)
    assert message["data"]["order"]["project"] == "vision-lab"
    assert headers["webhook-id"] == delivery.message_id
    with pytest.raises(WebhookVerificationError):
        Verifier("whsec_" + "A" * 44).verify(body, headers)


def test_only_the_events_a_webhook_chose_and_only_its_projects_reach_it(
    mia, projects, receiver, place_order, alice, carol, catalog
):
    _hook(mia, projects, receiver, events=("order.held",))
    place_order(alice)  # placed, not held
    place_order(carol, project=projects["nlp-lab"])
    assert not WebhookDelivery.objects.exists()


def test_a_host_that_runs_is_an_event(mia, projects, receiver, running_host):
    _hook(mia, projects, receiver, events=("host.running",))
    host = running_host()
    _deliver_all()
    [(_, body)] = receiver.received
    data = json.loads(body)["data"]["host"]
    assert data["id"] == str(host.pk) and data["status"] == "running"


def test_a_change_rolled_back_sends_nothing(mia, projects, receiver):
    from django.db import transaction

    _hook(mia, projects, receiver)
    with transaction.atomic():
        webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={})
        transaction.set_rollback(True)
    assert not WebhookDelivery.objects.exists()


def test_a_receiver_that_fails_is_tried_again_on_schedule_then_given_up(
    mia, projects, receiver, settings, clock
):
    settings.PORTAL_WEBHOOK_RETRY_SECONDS = [5, 300]
    _hook(mia, projects, receiver)
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={"n": 1})
    receiver.status = 503
    [delivery] = _deliver_all()
    assert delivery.status == D.PENDING and delivery.last_error == "Answered 503."
    assert delivery.next_attempt_at == clock.now + timedelta(seconds=5)
    assert webhooks_deliver_due() == 0  # not due yet
    # A second worker asking early gets nothing: the attempt is not made twice.
    assert webhook_deliver(delivery_id=delivery.pk) is None
    clock.shift(timedelta(seconds=5))
    delivery = webhook_deliver(delivery_id=delivery.pk, trigger="retry")
    assert delivery.status == D.PENDING and delivery.attempts == 2
    clock.shift(timedelta(seconds=300))
    delivery = webhook_deliver(delivery_id=delivery.pk, trigger="retry")
    assert delivery.status == D.FAILED and delivery.next_attempt_at is None
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert len(receiver.received) == 3 and ids == {delivery.message_id}
    assert [t.trigger for t in delivery.tries.order_by("at", "id")] == ["send", "retry", "retry"]


def test_redirects_are_not_followed(mia, projects, receiver):
    _hook(mia, projects, receiver)
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={})
    receiver.status, receiver.location = 302, "http://127.0.0.1:9/elsewhere"
    [delivery] = _deliver_all()
    assert delivery.response_status == 302
    assert "redirects are not followed" in delivery.last_error
    assert len(receiver.received) == 1


def test_a_resend_sends_the_same_message_again(api_as, mia, projects, receiver, settings):
    settings.PORTAL_WEBHOOK_RETRY_SECONDS = [5]
    hook, _ = _hook(mia, projects, receiver)
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={"n": 7})
    receiver.status = 500
    _deliver_all()
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=D.FAILED, next_attempt_at=None)
    receiver.status = 200
    response = api_as(mia).post(f"/api/v1/webhooks/{hook.pk}/deliveries/{delivery.pk}/resend/")
    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    delivery = webhook_deliver(delivery_id=delivery.pk, trigger="resend")
    assert delivery.status == D.DELIVERED
    (first, body1), (again, body2) = receiver.received
    assert first["webhook-id"] == again["webhook-id"] == delivery.message_id
    assert body1 == body2
    listed = api_as(mia).get(f"/api/v1/webhooks/{hook.pk}/deliveries/").json()["results"]
    assert [t["trigger"] for t in listed[0]["attempts_made"]] == ["resend", "send"]


def test_a_rotated_secret_signs_beside_the_old_one_for_a_day(mia, projects, receiver, clock):
    hook, old = _hook(mia, projects, receiver)
    _, new = webhook_secret_rotate(actor=mia, webhook=hook)
    assert new != old
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={})
    _deliver_all()
    headers, body = receiver.received[-1]
    Verifier(old).verify(body, headers)
    Verifier(new).verify(body, headers)
    clock.shift(timedelta(hours=24, seconds=1))
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={})
    _deliver_all()
    headers, body = receiver.received[-1]
    Verifier(new).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Verifier(old).verify(body, headers)


def test_a_url_that_comes_to_point_inside_is_refused_at_delivery(mia, projects, receiver, settings):
    _hook(mia, projects, receiver)
    webhook_emit(project_id=projects["vision-lab"].pk, event="order.placed", data={})
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    [delivery] = _deliver_all()
    assert receiver.received == []
    assert "https" in delivery.last_error and delivery.status == D.PENDING


def test_a_job_that_succeeds_is_heard_through_its_moves(mia, projects, receiver, catalog, alice):
    from instances import services
    from instances.models import Image
    from instances.services.jobs import job_assignment, job_run_exited, job_run_started, job_submit

    _hook(mia, projects, receiver, events=("job.starting", "job.running", "job.succeeded"))
    job = job_submit(
        requester=alice,
        project=projects["vision-lab"],
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        market="on_demand",
        name="resnet",
        command="python train.py",
    )
    host = services.instance_provision(instance_id=job.order.instances.get().pk)
    run = job_assignment(host=host).run
    job_run_started(host=host, job_id=job.pk, number=run.number, pid=1)
    job_run_exited(host=host, job_id=job.pk, number=run.number, exit_code=0)
    _deliver_all()
    messages = [json.loads(body) for _, body in receiver.received]
    assert [m["type"] for m in sorted(messages, key=lambda m: m["timestamp"])] == [
        "job.starting",
        "job.running",
        "job.succeeded",
    ]
    assert messages[-1]["data"]["job"]["name"] == "resnet"
