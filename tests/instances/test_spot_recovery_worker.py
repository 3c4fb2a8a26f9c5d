"""Spot recovery end to end, on PostgreSQL and Redis with a real worker and beat: how long an
order with relaunch_spot goes without a running host when the cloud takes one back.

The gap is measured on the cloud's own clock: from the moment the cloud took the original host
(its `interrupted` event) to the moment the replacement's boot ended (its `running` event),
0 when the replacement ran first. `pytest -s` prints the figures.
"""

from __future__ import annotations

import io

import boto3
import pytest
from django.core.management import call_command

from instances.models import Instance, InstanceEvent
from tests.workers import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BOOT = 3
LEAD = 20
RECONCILE = 5
DRAIN = 2
ENV = {
    "PORTAL_SIMULATED_BOOT_SECONDS": str(BOOT),
    "PORTAL_SPOT_WARNING_LEAD_SECONDS": str(LEAD),
    "PORTAL_RECONCILE_SECONDS": str(RECONCILE),
    "PORTAL_SPOT_EVENTS_SECONDS": str(DRAIN),
    "PORTAL_SPOT_EVENTS_QUEUE_URL": "",
}


@pytest.fixture(autouse=True)
def _same_cloud(settings, tmp_path):
    """This process plays the cloud's console (simulated_cloud): the worker's settings."""
    settings.PORTAL_SIMULATED_BOOT_SECONDS = BOOT
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = LEAD
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    ENV["PORTAL_CHECKPOINT_LOCAL_DIR"] = str(tmp_path / "checkpoints")


def _order_running_spot_host(api_as, alice, order_body) -> Instance:
    body = order_body(market="spot", interruption_policy="relaunch_spot")
    assert api_as(alice).post("/api/v1/orders/", body, format="json").status_code == 201

    def running():
        """the spot host running"""
        return Instance.objects.filter(status="running").first()

    return wait_for(running, timeout=90)


def _gap(original: Instance, timeout: float) -> tuple[float, Instance]:
    def replaced_and_gone():
        """the original terminated and its replacement running"""
        replacement = Instance.objects.filter(replaces=original, status="running").first()
        gone = Instance.objects.filter(pk=original.pk, status="terminated").exists()
        return replacement if replacement and gone else None

    replacement = wait_for(replaced_and_gone, timeout=timeout)
    taken = InstanceEvent.objects.get(instance=original, new_status="interrupted").at
    ran = InstanceEvent.objects.get(instance=replacement, new_status="running").at
    return max(0.0, (ran - taken).total_seconds()), replacement


def test_with_a_warning_the_replacement_runs_before_the_original_is_gone(
    worker_process, api_as, alice, catalog, order_body
):
    worker_process(beat=True, **ENV)
    original = _order_running_spot_host(api_as, alice, order_body)
    call_command("simulated_cloud", "warn", str(original.pk), stdout=io.StringIO())
    gap, replacement = _gap(original, timeout=LEAD + RECONCILE + 60)
    warned = Instance.objects.get(pk=original.pk).spot_warning_at
    started = replacement.created_at
    print(
        f"\nspot recovery with a warning (lead {LEAD} s, drain every {DRAIN} s, boot {BOOT} s): "
        f"replacement ordered {(started - warned).total_seconds():.1f} s after the warning; "
        f"gap without a running host {gap:.1f} s"
    )
    assert gap == 0
    assert replacement.market == "spot"
    assert Instance.objects.filter(replaces__isnull=False).count() == 1


def test_without_a_warning_reconcile_starts_the_replacement_within_a_period_and_a_boot(
    worker_process, api_as, alice, catalog, order_body
):
    worker_process(beat=True, **ENV)
    original = _order_running_spot_host(api_as, alice, order_body)
    call_command("simulated_cloud", "interrupt", str(original.pk), stdout=io.StringIO())
    gap, replacement = _gap(original, timeout=RECONCILE + 60)
    assert replacement.market == "spot"
    print(
        f"\nspot recovery without a warning (reconcile every {RECONCILE} s, boot {BOOT} s): "
        f"gap without a running host {gap:.1f} s"
    )
    # One reconcile period and one boot, plus beat's own tick and the worker's pick-up.
    assert gap <= RECONCILE + BOOT + 5


@pytest.fixture
def moto_sqs(monkeypatch, settings):
    """moto's SQS as a server the worker process reaches too, with one queue for the events."""
    from moto.server import ThreadedMotoServer

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint)
    url = client.create_queue(QueueName="portal-spot-events")["QueueUrl"]
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = url
    settings.PORTAL_SPOT_EVENTS_ENDPOINT_URL = endpoint
    yield (
        {
            "PORTAL_SPOT_EVENTS_QUEUE_URL": url,
            "PORTAL_SPOT_EVENTS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        },
        client,
    )
    server.stop()


def test_with_a_warning_through_the_sqs_queue_the_gap_is_zero_too(
    worker_process, api_as, alice, catalog, order_body, moto_sqs
):
    queue_env, client = moto_sqs
    worker_process(beat=True, **{**ENV, **queue_env})
    original = _order_running_spot_host(api_as, alice, order_body)
    # The simulated cloud posts the EventBridge events to the queue; the worker drains it.
    call_command("simulated_cloud", "warn", str(original.pk), stdout=io.StringIO())
    gap, replacement = _gap(original, timeout=LEAD + RECONCILE + 60)
    warned = Instance.objects.get(pk=original.pk).spot_warning_at
    print(
        f"\nspot recovery through SQS (moto server): replacement ordered "
        f"{(replacement.created_at - warned).total_seconds():.1f} s after the warning; "
        f"gap without a running host {gap:.1f} s"
    )
    assert gap == 0
    attributes = client.get_queue_attributes(
        QueueUrl=queue_env["PORTAL_SPOT_EVENTS_QUEUE_URL"], AttributeNames=["All"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
