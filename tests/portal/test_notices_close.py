"""Notices the world has answered close themselves; people dismiss the rest; the notices page
lists all of mine, open and closed; a notice offers a button or a link, never an API path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from billing.services.budgets import budget_topic, budgets_check
from instances import services
from instances.models import ApprovalPolicy, IdlePolicy, Instance
from instances.providers.gpu_profile import profile_of
from instances.providers.simulated import SimulatedProvider
from instances.services.transitions import instance_topic, instance_transition
from portal.models import Notice
from portal.services import notice_send

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_order_decided_closes_its_approval_notice(ada, bob, projects, place_order):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=1)
    order = place_order(bob, count=2)
    asked = Notice.objects.get(user=ada, subject__startswith="Approval needed")
    assert asked.closed_at is None
    services.order_approve(order=order, user=ada)
    asked.refresh_from_db()
    assert asked.closed_at is not None
    assert asked.closed_reason == "The order is approved."
    assert "Approval needed" not in signed_in(ada).get("/dashboard/").content.decode()


def test_an_order_that_expires_closes_its_approval_notice_too(ada, bob, projects, place_order):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=1)
    order = place_order(bob, count=2)
    services.order_cancel(order=order, user=bob)
    asked = Notice.objects.get(user=ada, subject__startswith="Approval needed")
    assert asked.closed_reason == "The order is cancelled."


def test_a_budget_month_that_ended_closes_its_notices(clock, fin, projects):
    november = datetime(2026, 11, 1, tzinfo=UTC).date()
    notice = notice_send(
        user=fin,
        subject="vision-lab has spent 80% of its November 2026 budget",
        topic=budget_topic(projects["vision-lab"], november),
    )
    budgets_check()  # still November
    notice.refresh_from_db()
    assert notice.closed_at is None
    clock.move_to(datetime(2026, 12, 1, 0, 5, tzinfo=UTC))
    budgets_check()
    notice.refresh_from_db()
    assert notice.closed_reason == "Its month has ended."


def test_keep_running_closes_the_idle_warning_and_its_body_names_no_api_path(
    clock, running_host, alice, projects
):
    IdlePolicy.objects.create(
        project=projects["vision-lab"], threshold_percent=10, idle_minutes=30, warning_minutes=5
    )
    host = running_host()
    SimulatedProvider().set_gpu_profile(host.cloud_id, profile_of("idle", now=clock.now))
    for _ in range(26):
        clock.shift(timedelta(minutes=1))
        services.telemetry_collect()
        services.idle_check()
    warning = Notice.objects.get(user=alice, subject__startswith="Idle host")
    assert "/api/" not in warning.body and "POST" not in warning.body
    assert warning.action_label == "Keep running"
    services.instance_keep_running(instance=Instance.objects.get(pk=host.pk), user=alice)
    warning.refresh_from_db()
    assert warning.closed_reason == "Kept running by alice."
    assert not warning.action_open


def test_a_host_that_ends_closes_its_lease_and_idle_notices(running_host, alice):
    host = running_host()
    lease = notice_send(
        user=alice, subject="Lease ends in 1 h", topic=instance_topic(host, "lease")
    )
    other = notice_send(user=alice, subject="Something else")
    services.instance_request_terminate(instance=host, user=alice)
    # The cloud reports it gone (the sync's move, made here without waiting for a worker).
    instance_transition(instance=host.pk, to="terminated", reason="gone", actor="system:sync")
    assert Instance.objects.get(pk=host.pk).status == Instance.Status.TERMINATED
    lease.refresh_from_db()
    other.refresh_from_db()
    assert lease.closed_reason == "The host is terminated."
    assert other.closed_at is None


def test_a_notice_is_dismissed_from_the_dashboard_and_stays_on_the_notices_page(alice):
    notice = notice_send(user=alice, subject="Your order was rejected")
    client = signed_in(alice)
    assert "Your order was rejected" in client.get("/dashboard/").content.decode()
    response = client.post(f"/notices/{notice.pk}/dismiss/", {"next": "/dashboard/"})
    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    notice.refresh_from_db()
    assert notice.closed_reason == "Dismissed."
    assert "Your order was rejected" not in client.get("/dashboard/").content.decode()
    page = client.get("/notices/").content.decode()
    assert "Your order was rejected" in page and "Dismissed." in page
    assert "Your order was rejected" not in client.get("/notices/?show=open").content.decode()


def test_nobody_dismisses_another_persons_notice(alice, bob):
    notice = notice_send(user=alice, subject="for alice")
    response = signed_in(bob).post(f"/notices/{notice.pk}/dismiss/")
    assert response.status_code == 404
    notice.refresh_from_db()
    assert notice.closed_at is None
