"""A pool's launches pass the project's approval policy as an order would, its fallback types
included: nlp-lab holds p4de.24xlarge and any on-demand order above $35/h for approval, and a
pool of p4d.24xlarge ($32.77/h) falling back to p4de ($40.97/h) must not launch p4de unasked."""

from __future__ import annotations

from decimal import Decimal

import pytest

from instances import services
from instances.models import Image, Pool, PoolEvent
from instances.services import approval_policy_set
from tests.conftest import ED25519
from tests.instances.pool_helpers import alive


@pytest.fixture
def nlp_policy(projects, ada):
    def set_it():
        return approval_policy_set(
            project=projects["nlp-lab"],
            actor=ada,
            instance_types=["p4de.24xlarge"],
            on_demand_price_above=Decimal("35"),
        )

    return set_it


@pytest.fixture
def make_a100_pool(catalog, projects, carol):
    def make(**overrides) -> Pool:
        fields = {
            "user": carol,
            "project": projects["nlp-lab"],
            "name": "llm",
            "instance_type": catalog["p4d.24xlarge"],
            "fallback_instance_types": ["p4de.24xlarge"],
            "image": Image.objects.get(name="tf-2.17-cuda12.3"),
            "ssh_public_key": ED25519,
            "min_size": 0,
            "desired": 1,
            "max_size": 1,
        }
        fields.update(overrides)
        return services.pool_create(**fields)

    return make


def test_a_pool_whose_fallback_needs_approval_waits_for_it_when_saved(nlp_policy, make_a100_pool):
    nlp_policy()
    pool = make_a100_pool()
    assert pool.status == Pool.Status.AWAITING_APPROVAL
    assert "p4de.24xlarge needs approval in nlp-lab" in pool.status_reason
    assert "fallback" in pool.status_reason


def test_a_pool_without_the_fallback_needs_no_approval(nlp_policy, make_a100_pool):
    nlp_policy()
    assert make_a100_pool(fallback_instance_types=[]).status == Pool.Status.ACTIVE


def test_the_api_says_a_pool_waits_for_approval_because_of_its_fallback(
    api_as, carol, nlp_policy, catalog
):
    nlp_policy()
    answer = api_as(carol).post(
        "/api/v1/pools/",
        {
            "project": "nlp-lab",
            "name": "llm",
            "instance_type": "p4d.24xlarge",
            "fallback_instance_types": ["p4de.24xlarge"],
            "image": "tf-2.17-cuda12.3",
            "ssh_public_key": ED25519,
            "min_size": 0,
            "desired": 1,
            "max_size": 1,
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["status"] == "awaiting_approval"
    assert "p4de.24xlarge needs approval" in answer.json()["status_reason"]


def test_a_fallback_launch_needing_approval_is_held_not_launched(nlp_policy, make_a100_pool, clock):
    pool = make_a100_pool()  # saved before the policy: nothing held it
    nlp_policy()
    services.autoscale()
    (first,) = alive(pool)
    assert first.instance_type.name == "p4d.24xlarge"
    services.pool_capacity_refused(instance=first)
    services.autoscale()
    assert alive(pool) == []
    refused = PoolEvent.objects.filter(pool=pool, kind=PoolEvent.Kind.REFUSED).get()
    assert "p4de.24xlarge needs approval in nlp-lab" in refused.message
    pool.refresh_from_db()
    assert pool.blocked_markets == ["on_demand"]


def test_an_approved_pool_launches_its_fallback(nlp_policy, make_a100_pool, ada, clock):
    nlp_policy()
    pool = make_a100_pool()
    services.order_approve(order=pool.launch_order, user=ada)
    services.autoscale()
    services.pool_capacity_refused(instance=alive(pool)[0])
    services.autoscale()
    assert [h.instance_type.name for h in alive(pool)] == ["p4de.24xlarge"]


def test_a_waiting_or_rejected_pools_page_promises_no_launch_it_would_not_make(
    nlp_policy, make_a100_pool, carol, ada, client
):
    """A pool waiting for approval said "the next autoscaler pass launches 1" (the pass skips
    it) and offered raising max (refused until approved); a rejected one said the same."""
    from bs4 import BeautifulSoup

    nlp_policy()
    pool = make_a100_pool()
    client.force_login(carol)

    def said(testid: str) -> str:
        page = BeautifulSoup(client.get(f"/pools/{pool.pk}/").content, "html.parser")
        return page.select_one(f'[data-testid="{testid}"]').get_text(" ", strip=True)

    assert "launches 1 once an admin approves it" in said("pool-no-hosts")
    assert "next autoscaler pass" not in said("pool-no-hosts")
    assert "raised once it is approved" in said("max-hint")
    services.order_reject(order=pool.launch_order, user=ada, reason="too dear")
    pool.refresh_from_db()
    assert pool.status == Pool.Status.REJECTED
    assert said("pool-no-hosts") == "No live hosts: the pool was rejected and launches none."


def test_the_inbox_says_what_approving_a_pool_does(nlp_policy, make_a100_pool, projects, ada):
    """The inbox read a pool's held order as an order: "Approving will fail now" (approving a
    pool admits nothing at once), "Its hosts are launched at once", and a flash "provisioning
    has started", though the pool launches only its wanted hosts, on its next pass."""
    from bs4 import BeautifulSoup
    from django.test import Client

    nlp_policy()
    services.quota_set(project=projects["nlp-lab"], actor=ada, max_gpus=16)
    pool = make_a100_pool(desired=1, max_size=3)  # 24 GPUs at full size, 16 allowed
    inbox = Client()
    inbox.force_login(ada)
    page = BeautifulSoup(inbox.get("/approvals/").content, "html.parser")
    card = page.select_one(f'[data-order="{pool.launch_order_id}"]')
    said = card.get_text(" ", strip=True)
    assert "A new pool: llm" in said
    assert "up to 3× p4d.24xlarge" in said
    assert card.select_one("[data-will-fail]") is None
    held = card.select_one("[data-will-hold]").get_text(" ", strip=True)
    assert held.startswith("At its full size the pool would be held now: Quota exceeded")
    launches = card.select_one('[data-testid="approval-pool-launches"]').get_text(" ", strip=True)
    assert "launches its 1 wanted host on its next pass" in launches
    approve = card.select_one("button.primary")
    assert approve["data-confirm"] == "Let pool llm of carol in nlp-lab grow to 3× p4d.24xlarge?"
    assert "launched at once" not in approve["data-confirm-text"]

    response = inbox.post(f"/approvals/{pool.launch_order_id}/approve/", follow=True)
    flash = " ".join(m.message for m in response.context["messages"])
    assert flash.startswith("Approved pool llm of carol: it may grow to 3× p4d.24xlarge")
    assert "provisioning has started" not in flash
    pool.refresh_from_db()
    assert (pool.status, pool.approved_max) == (Pool.Status.ACTIVE, 3)
    assert alive(pool) == []  # nothing launched by the approval itself


def test_notices_the_api_and_the_dashboards_name_a_pools_order_as_the_pool(
    nlp_policy, make_a100_pool, ada, carol, api_as
):
    """Approvers were asked about "3x p4d.24xlarge" and the requester told "Approved: 3x ..."
    with a link to My hosts; the API and CLI had no way to tell a pool's order from hosts."""
    from django.test import Client

    from portal.models import Notice

    nlp_policy()
    pool = make_a100_pool(desired=1, max_size=3)
    asked = Notice.objects.get(user=ada)
    assert asked.subject == (
        "Approval needed: carol ordered pool llm, up to 3× p4d.24xlarge for nlp-lab"
    )
    assert asked.body.endswith("/h at full size.")
    shown = api_as(ada).get(f"/api/v1/orders/{pool.launch_order_id}/").json()
    assert shown["pool"] == {"id": str(pool.pk), "name": "llm"} and shown["count"] == 3
    admin = Client()
    admin.force_login(ada)
    assert "pool llm, up to 3× p4d.24xlarge" in admin.get("/dashboard/").content.decode()
    services.order_approve(order=pool.launch_order, user=ada)
    told = Notice.objects.get(user=carol)
    assert told.subject == "Approved: pool llm, up to 3× p4d.24xlarge for nlp-lab"
    assert "launches its wanted hosts on its next pass" in told.body
    assert told.link == f"/pools/{pool.pk}/"
