"""Held orders: the requester, a manager or an admin cancels one waiting for approval; My hosts
lists the waiting orders with what they wait for."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from instances.models import Instance, Order
from instances.services import approval_policy_set
from portal.models import Membership, Notice
from portal.services import membership_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(clock, ada, alice, projects, place_order):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)
    order = place_order(alice, count=3)
    assert order.status == Order.Status.PENDING_APPROVAL
    return order


def test_the_requester_cancels_a_held_order(held, alice, api_as):
    response = api_as(alice).post(f"/api/v1/orders/{held.pk}/cancel/", {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    held.refresh_from_db()
    assert held.status == Order.Status.CANCELLED
    assert held.decided_by == alice
    event = held.events.order_by("-id").first()
    assert (event.old_status, event.new_status, event.actor) == (
        "pending_approval",
        "cancelled",
        "user:alice",
    )
    assert not Instance.objects.filter(order=held).exists()
    call = AuditEvent.objects.get(path=f"/api/v1/orders/{held.pk}/cancel/")
    assert (call.actor_username, call.status, call.object_ref) == ("alice", 200, f"order:{held.pk}")
    # Nobody else is told: the requester did it.
    assert not Notice.objects.filter(user=alice, subject__startswith="Cancelled").exists()


def test_a_manager_cancels_and_the_requester_hears_why(held, alice, bob, projects, api_as):
    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    response = api_as(bob).post(
        f"/api/v1/orders/{held.pk}/cancel/", {"reason": "wrong project"}, format="json"
    )
    assert response.status_code == 200
    notice = Notice.objects.get(user=alice, subject__startswith="Cancelled")
    assert "bob cancelled your order while it waited for approval: wrong project" in notice.body


def test_an_admin_cancels_a_held_order(held, ada, api_as):
    assert api_as(ada).post(f"/api/v1/orders/{held.pk}/cancel/").status_code == 200


def test_others_may_not_cancel(held, bob, carol, fin, api_as):
    assert api_as(bob).post(f"/api/v1/orders/{held.pk}/cancel/").status_code == 403
    assert api_as(fin).post(f"/api/v1/orders/{held.pk}/cancel/").status_code == 403
    assert api_as(carol).post(f"/api/v1/orders/{held.pk}/cancel/").status_code == 404
    held.refresh_from_db()
    assert held.status == Order.Status.PENDING_APPROVAL


def test_a_decided_order_cannot_be_cancelled(held, alice, ada, api_as):
    assert api_as(ada).post(f"/api/v1/orders/{held.pk}/approve/").status_code == 200
    response = api_as(alice).post(f"/api/v1/orders/{held.pk}/cancel/")
    assert response.status_code == 409
    assert response.json()["code"] == "already_decided"
    assert "already approved by ada" in response.json()["detail"]


def test_a_cancelled_order_cannot_be_approved_after(held, alice, ada, api_as):
    assert api_as(alice).post(f"/api/v1/orders/{held.pk}/cancel/").status_code == 200
    response = api_as(ada).post(f"/api/v1/orders/{held.pk}/approve/")
    assert response.status_code == 409
    assert "already cancelled by alice" in response.json()["detail"]
    assert not Instance.objects.filter(order=held).exists()


def test_my_hosts_lists_held_orders_with_what_they_wait_for(held, client, alice, ada):
    client.force_login(alice)
    page = client.get("/hosts/").content.decode()
    assert "Waiting for approval" in page
    assert "3 GPUs is more than the 2 vision-lab allows without approval" in page
    assert "ada" in page  # who can decide
    assert held.created_at.strftime("%b %-d, %H:%M") in page
    assert f'action="/orders/{held.pk}/cancel/"' in page


def test_cancel_from_my_hosts(held, client, alice):
    client.force_login(alice)
    response = client.post(f"/orders/{held.pk}/cancel/", follow=True)
    assert response.redirect_chain[-1][0] == "/hosts/"
    page = response.content.decode()
    assert "Cancelled the order for 3× g5.xlarge in vision-lab" in page
    assert "Waiting for approval" not in page
    held.refresh_from_db()
    assert held.status == Order.Status.CANCELLED


def test_a_member_sees_the_held_order_of_a_colleague_without_a_cancel_button(held, client, bob):
    client.force_login(bob)
    page = client.get("/hosts/?scope=projects").content.decode()
    assert "3× g5.xlarge" in page
    assert "/cancel/" not in page
    mine = client.get("/hosts/").content.decode()
    assert "Waiting for approval" not in mine
