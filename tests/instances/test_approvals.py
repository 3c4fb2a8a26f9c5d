"""Approval policies hold big orders for an admin or a project manager to decide."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from instances import services
from instances.models import Instance, Order
from instances.services import approval_policy_set, quota_set
from portal.lib.errors import Forbidden
from portal.models import Membership, Notice
from portal.services import membership_set

URL = "/api/v1/orders/"


@pytest.fixture
def policy(projects, ada):
    return approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)


@pytest.fixture
def waiting(policy, place_order, bob, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return place_order(bob, count=3)


@pytest.mark.parametrize(
    ("policy_values", "order", "needs"),
    [
        ({"gpus_above": 2}, {"count": 3}, "3 GPUs is more than the 2 vision-lab allows"),
        ({"gpus_above": 2}, {"count": 2}, None),
        ({"instance_types": ["g5.xlarge"]}, {}, "g5.xlarge needs approval in vision-lab"),
        (
            {"on_demand_price_above": Decimal("2.00")},
            {"count": 2},
            "$2.01/h on-demand is above the $2.00/h",
        ),
        ({"on_demand_price_above": Decimal("2.00")}, {"count": 2, "market": "spot"}, None),
    ],
)
def test_the_policy_decides_which_orders_wait(
    projects, ada, bob, place_order, policy_values, order, needs
):
    approval_policy_set(project=projects["vision-lab"], actor=ada, **policy_values)
    placed = place_order(bob, **order)
    if needs is None:
        assert placed.status == Order.Status.PLACED
        assert placed.instances.count() == placed.count
    else:
        assert placed.status == Order.Status.PENDING_APPROVAL
        assert needs in placed.approval_reason
        assert not placed.instances.exists()


def test_a_waiting_order_tells_the_approvers_by_notice_and_email(waiting, ada):
    notice = Notice.objects.get(user=ada)
    assert notice.subject == "Approval needed: bob ordered 3× g5.xlarge for vision-lab"
    assert any("Approval needed" in message.subject for message in mail.outbox)


def test_ada_approves_and_the_order_provisions(waiting, ada, bob, api_as):
    response = api_as(ada).post(f"{URL}{waiting.pk}/approve/", {"reason": "go"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "approved" and body["decided_by"] == "ada"
    assert [i["status"] for i in body["instances"]] == ["requested"] * 3
    assert Notice.objects.filter(user=bob, subject__startswith="Approved").exists()
    instance = Instance.objects.filter(order=waiting).first()
    assert services.instance_provision(instance_id=instance.pk).status == "running"


def test_a_manager_approves_for_the_project(waiting, alice, projects, api_as):
    membership_set(project=projects["vision-lab"], user=alice, role=Membership.Role.MANAGER)
    assert api_as(alice).post(f"{URL}{waiting.pk}/approve/").status_code == 200


def test_a_rejection_needs_a_reason_and_reaches_the_requester(waiting, ada, bob, api_as):
    response = api_as(ada).post(f"{URL}{waiting.pk}/reject/", {}, format="json")
    assert response.status_code == 400 and "reason" in response.json()["fields"]
    response = api_as(ada).post(
        f"{URL}{waiting.pk}/reject/", {"reason": "use spot for this"}, format="json"
    )
    assert response.json()["status"] == "rejected"
    notice = Notice.objects.get(user=bob, subject__startswith="Rejected")
    assert "use spot for this" in notice.body
    assert not Instance.objects.exists()


@pytest.mark.parametrize(
    ("persona", "status"), [("bob", 403), ("alice", 403), ("fin", 403), ("carol", 404)]
)
def test_others_cannot_decide(waiting, api_as, request, persona, status):
    user = request.getfixturevalue(persona)
    assert api_as(user).post(f"{URL}{waiting.pk}/approve/").status_code == status
    waiting.refresh_from_db()
    assert waiting.status == Order.Status.PENDING_APPROVAL


def test_nobody_approves_their_own_order(policy, place_order, projects, alice):
    membership_set(project=projects["vision-lab"], user=alice, role=Membership.Role.MANAGER)
    mine = place_order(alice, count=3)
    with pytest.raises(Forbidden):
        services.order_approve(order=mine, user=alice)


def test_a_decided_order_cannot_be_decided_again(waiting, ada, api_as):
    api_as(ada).post(f"{URL}{waiting.pk}/approve/")
    response = api_as(ada).post(f"{URL}{waiting.pk}/reject/", {"reason": "no"}, format="json")
    assert response.status_code == 409
    assert Instance.objects.filter(order=waiting).count() == 3


def test_approval_checks_the_quota_again(waiting, ada, projects, api_as, place_order, alice):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=3)
    place_order(alice, count=2)  # meanwhile alice takes two of the three GPUs
    response = api_as(ada).post(f"{URL}{waiting.pk}/approve/")
    assert response.status_code == 409
    assert response.json()["code"] == "quota_exceeded"
    waiting.refresh_from_db()
    assert waiting.status == Order.Status.PENDING_APPROVAL


def test_orders_nobody_decides_expire(boundary_clock, waiting, bob, policy):
    assert services.orders_expire() == []
    boundary_clock.shift(timedelta(days=3, seconds=-1))  # a second short of the 3 days allowed
    assert services.orders_expire() == []
    boundary_clock.shift(timedelta(seconds=1))
    assert services.orders_expire() == [str(waiting.pk)]
    waiting.refresh_from_db()
    assert waiting.status == Order.Status.EXPIRED
    assert Notice.objects.filter(user=bob, subject__startswith="Expired").exists()
    assert list(waiting.events.values_list("new_status", flat=True)) == [
        "pending_approval",
        "expired",
    ]
