"""On a real Celery worker: /metrics sums the worker's counters with the web's, and one request
id leads from the API response to the task's log lines and the audit rows."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.models import AuditEvent
from instances.models import Instance
from portal.lib.celery_ops import forget_worker_ping, ping_workers
from tests.workers import Worker, purge_queues, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

TOKEN = "metrics-token-for-worker-tests-0123"


@pytest.fixture
def metrics_dir(settings, tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_METRICS_DIR = str(folder)
    return folder


def scrape(client) -> dict:
    """Sample values by (name, labels). This test process counts in memory and the worker in
    files, so a series can come twice (once from each): the two are summed, as Prometheus
    would see them were this process in multiprocess mode too."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    samples: dict = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            samples[key] = samples.get(key, 0) + sample.value
    return samples


def all_running(n: int):
    def check():
        """every ordered host running"""
        statuses = list(Instance.objects.values_list("status", flat=True))
        return len(statuses) == n and set(statuses) == {"running"}

    return check


def test_metrics_after_an_order_runs_on_a_real_worker(
    worker_process, metrics_dir, client, api_as, alice, catalog, order_body
):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
    purge_queues()
    response = api_as(alice).post("/api/v1/orders/", order_body(count=2), format="json")
    assert response.status_code == 201
    queued = scrape(client)
    assert queued[("portal_celery_queue_length", (("queue", "provisioning"),))] == 2
    assert queued[("portal_orders_total", (("outcome", "admitted"),))] >= 1

    # A worker left over by another test would take one of the tasks and count it elsewhere.
    stray, answer = ping_workers()
    assert not stray, f"another worker consumes this broker: {answer}"
    # Not worker_process(), which empties the queues first: these two tasks are the test.
    worker = Worker(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), PORTAL_SIMULATED_BOOT_SECONDS="1")
    labels = (("instance_type", "g5.xlarge"), ("market", "on_demand"))
    # Earlier tests in this process may have observed some already.
    count = queued.get(("portal_provisioning_seconds_count", labels), 0)
    launches = (("call", "launch"), ("provider", "simulated"))
    launched = queued.get(("portal_cloud_calls_total", launches), 0)
    success = (("state", "success"), ("task", "instances.tasks.provision_instance"))
    succeeded = queued.get(("portal_celery_tasks_total", success), 0)

    def both_observed():
        """the worker's two provisioning times in the scrape"""
        return scrape(client).get(("portal_provisioning_seconds_count", labels)) == count + 2

    try:
        worker.start()
        wait_for(all_running(2), timeout=90)
        # Observed just after the commit that the test saw: give the worker that moment.
        wait_for(both_observed, timeout=10)
    finally:
        worker.stop()

    # Observed in the worker's processes, read from their files by this scrape.
    samples = scrape(client)
    assert samples[("portal_provisioning_seconds_count", labels)] == count + 2
    assert samples[("portal_provisioning_seconds_sum", labels)] > 0
    hosts = (("instance_type", "g5.xlarge"), ("market", "on_demand"), ("status", "running"))
    assert samples[("portal_hosts", hosts)] == 2
    assert samples[("portal_celery_queue_length", (("queue", "provisioning"),))] == 0
    assert samples[("portal_celery_queue_length", (("queue", "celery"),))] == 0
    assert samples[("portal_cloud_calls_total", launches)] == launched + 2
    assert samples[("portal_celery_tasks_total", success)] == succeeded + 2


def test_one_request_id_leads_from_the_response_to_task_logs_and_audit_rows(
    worker_process, client, api_as, alice, catalog, order_body
):
    worker = worker_process(PORTAL_LOG_FORMAT="json", PORTAL_SIMULATED_BOOT_SECONDS="1")
    forget_worker_ping()  # an earlier test's "no worker" answer may still be reused
    health = client.get("/health/").json()
    assert health["workers"] == "ok", health
    response = api_as(alice).post(
        "/api/v1/orders/", order_body(count=1), format="json", HTTP_X_REQUEST_ID="trace-me-0001"
    )
    assert response.status_code == 201
    assert response["X-Request-ID"] == "trace-me-0001"
    wait_for(all_running(1), timeout=90)

    def task_lines():
        """the provision task's log lines, as JSON, with the request id"""
        lines = []
        for raw in list(worker.output):
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if line.get("request_id") == "trace-me-0001":
                lines.append(line)
        return lines if any("provision_instance" in line["message"] for line in lines) else None

    lines = wait_for(task_lines, timeout=30)
    assert all(line["level"] and line["logger"] and line["time"] for line in lines)
    rows = AuditEvent.objects.filter(request_id="trace-me-0001")
    methods = set(rows.values_list("method", flat=True))
    assert "POST" in methods  # the API call
    assert "TASK" in methods  # the worker's state changes
    assert rows.filter(actor_username="system:provision").exists()
