"""Every list endpoint of /api/v1/ costs the same number of queries for a page of 10 rows as
for a page of 200: nothing is read once per row (the orders list once cost 16, 101 and 865
queries for pages of 10, 50 and 200 orders)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.services import audit_record_system
from billing.services.budgets import budget_set
from instances import services
from instances.models import Image, InstanceType, Order, Pool, PoolEvent, QuotaRequest
from instances.services import quota_request_open, quota_set
from instances.services.pools.lifecycle import pool_event
from portal.lib.rest import Pagination
from portal.models import Membership, Webhook, WebhookAttempt, WebhookDelivery
from portal.services import (
    membership_set,
    project_upsert,
    token_issue,
    webhook_create,
    webhook_emit,
)
from portal.urls import router
from tests.conftest import ED25519

SMALL, LARGE = 10, 200


@pytest.fixture
def world(catalog, projects, alice, ada, place_order, settings):
    """Rows for every list endpoint, grown to ``n`` of each on demand. Each grower brings its
    endpoint's rows to ``n`` and returns who reads them and the URL."""
    settings.PORTAL_POOL_MAX_SCHEDULES = LARGE  # one pool's schedules, 200 of them
    settings.PORTAL_WEBHOOKS_PER_PROJECT = LARGE
    vision = projects["vision-lab"]
    quota_set(project=vision, actor=ada, max_gpus=10_000, max_instances=10_000)
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    pool = services.pool_create(
        user=alice,
        project=vision,
        name="walkers",
        instance_type=catalog["g5.xlarge"],
        image=image,
        ssh_public_key=ED25519,
        max_size=4,
        desired=0,
    )

    def grow_orders(n: int) -> None:
        # Running, ended and still requested, spot and on-demand: every kind of host the list
        # costs (ended ones free the simulated cloud's capacity of 40 hosts a type).
        for i in range(Order.objects.filter(pool=None).count(), n):
            spot = i % 4 == 1 or (i % 4 == 0 and i // 4 % 2 == 1)
            order = place_order(
                alice,
                market="spot" if spot else "on_demand",
                interruption_policy="notify" if spot else "",
                instance_type=catalog["g6.xlarge" if i // 4 % 2 else "g5.xlarge"],
            )
            host = order.instances.get()
            if i % 4 == 3:
                continue
            services.instance_provision(instance_id=host.pk)
            if i % 4 in (1, 2):
                services.instance_request_action(instance=host, user=alice, action="terminate")
                services.instance_cloud_action(instance_id=host.pk, action="terminate")

    def grow_types(n: int) -> None:
        model = catalog["g5.xlarge"]
        for i in range(InstanceType.objects.offered().count(), n):
            copy = InstanceType.objects.get(pk=model.pk)
            copy.pk, copy.name = None, f"x{i}.bench"
            services.instance_type_save(instance_type=copy)

    def grow_mig_types(n: int) -> None:
        # Types of an A100 (six slices each), n of them at least.
        model = catalog["p4d.24xlarge"]
        for i in range(InstanceType.objects.offered().exclude(mig_profiles=[]).count(), n):
            copy = InstanceType.objects.get(pk=model.pk)
            copy.pk, copy.name = None, f"x{i}.mig"
            services.instance_type_save(instance_type=copy)

    def grow_images(n: int) -> None:
        for i in range(Image.objects.filter(is_active=True).count(), n):
            copy = Image.objects.get(pk=image.pk)
            copy.pk, copy.name = None, f"tf-bench-{i}"
            services.image_save(image=copy)

    def grow_projects(n: int) -> None:
        # Each with a member, a project quota, the member's own quota and a budget.
        for i in range(n):
            project, created = project_upsert(slug=f"lab-{i}", name=f"Lab {i}")
            if not created:
                continue
            membership_set(project=project, user=alice, role=Membership.Role.MANAGER)
            quota_set(project=project, actor=ada, max_gpus=8)
            quota_set(project=project, user=alice, actor=ada, max_instances=3)
            budget_set(project=project, actor=ada, monthly_amount="100")

    def grow_pools(n: int) -> None:
        for i in range(Pool.objects.count(), n):
            more = services.pool_create(
                user=alice,
                project=vision,
                name=f"pool-{i}",
                instance_type=catalog["g5.xlarge"],
                image=image,
                ssh_public_key=ED25519,
                max_size=4,
                desired=0,
            )
            services.schedule_create(pool=more, user=alice, cron="0 9 * * 1-5", desired=1)

    def grow_schedules(n: int) -> None:
        for i in range(pool.schedules.count(), n):
            services.schedule_create(pool=pool, user=alice, cron=f"{i % 60} 9 * * *", desired=1)

    def grow_pool_events(n: int) -> None:
        start = timezone.now()
        for i in range(pool.events.count(), n):
            pool_event(
                pool,
                PoolEvent.Kind.CHANGED,
                f"desired {i}",
                actor="alice",
                at=start + timedelta(seconds=i),
            )

    def grow_tokens(n: int) -> None:
        for i in range(alice.api_tokens.count(), n):
            token_issue(user=alice, name=f"laptop {i}")

    def grow_quota_requests(n: int) -> None:
        for i in range(QuotaRequest.objects.count(), n):
            quota_request_open(requester=alice, project=vision, gpus=1, reason=f"run {i}")

    def grow_jobs(n: int) -> None:
        # Pending jobs, and jobs whose run was handed to a running host (its runs, events and
        # hosts on the page); a few hosts, within the simulated cloud's capacity.
        from instances.models import Job
        from instances.services.jobs import job_assignment, job_submit

        for i in range(Job.objects.count(), n):
            job = job_submit(
                requester=alice,
                project=vision,
                instance_type=catalog["g5.xlarge"],
                image=image,
                market="spot" if i % 2 else "on_demand",
                name=f"job-{i}",
                command="python train.py",
            )
            if i < 6:
                host = services.instance_provision(instance_id=job.order.instances.get().pk)
                job_assignment(host=host)

    hook, _ = webhook_create(
        actor=ada, project=vision, url="https://hooks.example.org/0", events=["host.failed"]
    )

    def grow_webhooks(n: int) -> None:
        for i in range(Webhook.objects.count(), n):
            webhook_create(
                actor=ada,
                project=vision,
                url=f"https://hooks.example.org/{i}",
                events=["order.placed", "budget.threshold"],
            )

    def grow_deliveries(n: int) -> None:
        # Each with an attempt or two, as the page shows them.
        for i in range(hook.deliveries.count(), n):
            webhook_emit(project_id=vision.pk, event="host.failed", data={"n": i})
        for delivery in hook.deliveries.filter(attempts=0):
            for trigger in ("send", "retry")[: 1 + delivery.pk % 2]:
                WebhookAttempt.objects.create(
                    delivery=delivery, at=timezone.now(), response_status=503, trigger=trigger
                )
            WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=1)

    def grow_audit(n: int) -> None:
        from audit.models import AuditEvent

        for _ in range(AuditEvent.objects.count(), n):
            audit_record_system(name="bench", action="record", summary={"rows": 1})

    return {
        "instance-types": (grow_types, alice, "/api/v1/instance-types/"),
        "images": (grow_images, alice, "/api/v1/images/"),
        "mig-profiles": (grow_mig_types, alice, "/api/v1/mig-profiles/"),
        "projects": (grow_projects, alice, "/api/v1/projects/"),
        "audit/events": (grow_audit, ada, "/api/v1/audit/events/"),
        "orders": (grow_orders, alice, "/api/v1/orders/"),
        "instances": (grow_orders, alice, "/api/v1/instances/"),
        "pools": (grow_pools, alice, "/api/v1/pools/"),
        "jobs": (grow_jobs, alice, "/api/v1/jobs/"),
        "pool schedules": (grow_schedules, alice, f"/api/v1/pools/{pool.pk}/schedules/"),
        "pool events": (grow_pool_events, alice, f"/api/v1/pools/{pool.pk}/events/"),
        "quotas": (grow_projects, alice, "/api/v1/quotas/"),
        "quota-requests": (grow_quota_requests, ada, "/api/v1/quota-requests/"),
        "auth/tokens": (grow_tokens, alice, "/api/v1/auth/tokens/"),
        "budgets": (grow_projects, ada, "/api/v1/budgets/"),
        "webhooks": (grow_webhooks, ada, "/api/v1/webhooks/"),
        "webhook deliveries": (grow_deliveries, ada, f"/api/v1/webhooks/{hook.pk}/deliveries/"),
    }


# Routes that list rows, beside the ones the walk below visits (nested lists by their name).
NESTED = {"pool schedules", "pool events", "webhook deliveries"}
NOT_LISTS = {
    # A report over the rollups: its lines are groups, read in one query (tests/billing).
    "costs",
}


def listed_routes() -> set[str]:
    return {
        prefix
        for prefix, viewset, _ in router.registry
        if hasattr(viewset, "list") and prefix not in NOT_LISTS
    }


def test_the_walk_visits_every_list_endpoint_of_the_api(world):
    assert set(world) - NESTED == listed_routes()


def queries(api, url: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = api.get(url, {"page_size": Pagination.max_page_size})
    assert response.status_code == 200, (url, response.content[:300])
    body = response.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    return len(captured.captured_queries), len(rows)


# A sweep (every list grown to 200 rows): in make test, not in make test-fast's inner loop.
@pytest.mark.sweep
def test_a_page_of_200_rows_costs_the_queries_of_a_page_of_10(api_as, world):
    counts = {}
    for size in (SMALL, LARGE):
        for endpoint, (grow, viewer, url) in world.items():
            grow(size)
            api = api_as(viewer)
            api.get(url)  # the first request of a session warms its caches
            count, shown = queries(api, url)
            assert shown >= size, (endpoint, shown)
            counts.setdefault(endpoint, []).append(count)
    for endpoint, (at_small, at_large) in counts.items():
        print(f"{endpoint}: {at_small} queries for {SMALL} rows, {at_large} for {LARGE}")
    assert {name: small for name, (small, _) in counts.items()} == {
        name: large for name, (_, large) in counts.items()
    }


def test_the_schema_states_the_largest_page_on_every_list(api_as, alice):
    schema = api_as(alice).get("/api/v1/schema/", {"format": "json"}).json()
    sizes = [
        parameter
        for path in schema["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
        if parameter.get("name") == "page_size"
    ]
    assert len(sizes) >= len(listed_routes())
    for parameter in sizes:
        assert "at most 500" in parameter["description"]
        assert "answers 400" in parameter["description"]
        assert parameter["schema"]["maximum"] == 500


def test_a_page_larger_than_500_is_refused_not_cut_down(api_as, alice, catalog):
    api = api_as(alice)
    assert api.get("/api/v1/instance-types/", {"page_size": 500}).status_code == 200
    response = api.get("/api/v1/instance-types/", {"page_size": 501})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert body["fields"]["page_size"] == ["501 is not a whole number from 1 to 500."]
