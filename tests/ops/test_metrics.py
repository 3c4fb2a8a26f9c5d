"""/metrics: bearer token, route-pattern labels, scrape-time gauges in a fixed number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from instances.models import Instance
from portal.lib.celery_ops import beat_clear, beat_record
from tests.bench.bench_orders import make_instances

TOKEN = "metrics-token-for-tests-0123456789"

pytestmark = pytest.mark.django_db


@pytest.fixture
def metrics_on(settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_METRICS_DIR = ""


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_does_not_exist_without_a_token_configured(client, settings):
    settings.PORTAL_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


def test_metrics_asks_for_a_bearer_token(client, metrics_on):
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_metrics_refuses_a_wrong_token(client, metrics_on):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401


def test_requests_are_labelled_by_route_pattern_not_by_path(client, metrics_on, alice):
    client.force_login(alice)
    before = scrape(client)
    ids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(50)]
    for pk in ids:
        assert client.get(f"/api/v1/instances/{pk}/").status_code == 404
    after = scrape(client)
    routes = {
        dict(labels).get("route")
        for (name, labels) in after
        if name == "portal_http_requests_total"
    }
    assert not any(pk in (route or "") for route in routes for pk in ids)
    # DRF's router writes its routes as regular expressions; the label is that pattern.
    labels = {"route": "api/v1/instances/(?P<pk>[^/.]+)/$", "method": "GET", "status": "404"}
    grown = value(after, "portal_http_requests_total", **labels) - value(
        before, "portal_http_requests_total", **labels
    )
    assert grown == 50


def test_an_unrouted_path_has_one_label(client, metrics_on):
    client.get("/no-such-page-1/")
    client.get("/no-such-page-2/")
    samples = scrape(client)
    routes = {dict(labels).get("route") for (name, labels) in samples if "http" in name}
    assert "<unmatched>" in routes
    assert not any("no-such-page" in (route or "") for route in routes)


def _scrape_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        scrape(client)
    return len(queries)


def test_scrape_runs_the_same_number_of_queries_at_10_and_100_hosts(
    client, metrics_on, alice, projects, catalog
):
    project = projects["vision-lab"]
    make_instances(alice, project, 10)
    at_10 = _scrape_queries(client)
    make_instances(alice, project, 100)
    at_100 = _scrape_queries(client)
    assert at_10 == at_100
    samples = scrape(client)
    hosts = value(
        samples, "portal_hosts", status="running", market="on_demand", instance_type="g5.xlarge"
    )
    assert hosts == Instance.objects.count() == 100


def test_metering_and_seal_lag_are_reported(client, metrics_on, alice, projects, catalog, clock):
    make_instances(alice, projects["vision-lab"], 3)
    samples = scrape(client)
    # make_instances dates the oldest event 2 minutes 60 s back, and nothing is metered yet.
    assert value(samples, "portal_metering_lag_seconds") == pytest.approx(180, abs=1)
    assert ("portal_audit_seal_lag_seconds", ()) in samples


def test_beat_last_run_is_exported_per_task(client, metrics_on, clock):
    beat_clear()
    beat_record("reconcile-instances", at=clock.now.timestamp() - 12)
    samples = scrape(client)
    assert value(
        samples, "portal_beat_last_run_age_seconds", task="reconcile-instances"
    ) == pytest.approx(12, abs=1)
    beat_clear()


def test_queue_depth_counts_waiting_messages(client, metrics_on, settings):
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("queue depth per LLEN needs the Redis broker")
    from tests.workers import purge_queues

    purge_queues()
    from portal.celery import app

    for _ in range(3):
        app.send_task("instances.tasks.reconcile", queue="celery")
    samples = scrape(client)
    assert value(samples, "portal_celery_queue_length", queue="celery") == 3
    assert value(samples, "portal_celery_queue_length", queue="provisioning") == 0
    purge_queues()


def test_pools_are_exported_in_the_same_number_of_queries_at_1_and_4_pools(
    client, metrics_on, make_pool, projects, ada, clock
):
    from billing.services.budgets import budget_set
    from instances.tasks import autoscale

    make_pool(name="p0", desired=2, max_size=6)
    autoscale()  # the task: the pass and its counters
    one = _scrape_queries(client)
    for n in range(1, 4):
        make_pool(name=f"p{n}", desired=1)
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="1.00", policy="block_all")
    before = scrape(client)
    autoscale()
    assert _scrape_queries(client) == one
    samples = scrape(client)
    pool = {"project": "vision-lab", "pool": "p0"}
    assert value(samples, "portal_pool_desired_hosts", **pool) == 2
    assert value(samples, "portal_pool_max_hosts", **pool) == 6
    assert value(samples, "portal_pool_hosts", **pool, market="on_demand", status="requested") == 2
    # The $1 budget held the three new pools: each says so until a limit moves.
    held = {"project": "vision-lab", "pool": "p3"}
    assert value(samples, "portal_pool_refusal_streak", **held) == 1
    assert value(samples, "portal_pool_refusal_streak", **pool) == 0
    assert value(samples, "portal_pool_hosts", **held, market="on_demand", status="requested") == 0

    def grew(name, **labels):
        return value(samples, name, **labels) - value(before, name, **labels)

    assert value(before, "portal_autoscaler_hosts_total", action="launched", market="on_demand")
    assert grew("portal_autoscaler_hosts_total", action="launched", market="on_demand") == 0
    assert grew("portal_autoscaler_refusals_total", limit="budget") == 3
    assert grew("portal_autoscaler_pass_duration_seconds_count") == 1
