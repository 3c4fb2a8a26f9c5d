"""Quotas: set by admins, enforced when orders are placed, counted from live hosts."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from instances import services
from instances.models import Instance, Order, QuotaChange
from instances.selectors.quotas import usage
from instances.services import quota_set
from instances.services.quotas import QuotaExceeded
from portal.lib.errors import Forbidden

S = Instance.Status


@pytest.fixture
def vision(projects):
    return projects["vision-lab"]


def test_an_order_within_the_quota_is_placed(place_order, alice, ada, vision):
    quota_set(project=vision, actor=ada, max_gpus=4)
    order = place_order(alice, count=4)
    assert order.status == Order.Status.PLACED
    assert usage(project=vision).gpus == 4


def test_an_order_over_the_gpu_quota_is_refused_naming_limit_use_and_ask(
    place_order, alice, ada, vision, catalog
):
    quota_set(project=vision, actor=ada, max_gpus=8)
    place_order(alice, count=3)
    with pytest.raises(QuotaExceeded) as refused:
        place_order(alice, instance_type=catalog["p4d.24xlarge"], count=1)
    assert refused.value.message == (
        "Quota exceeded: vision-lab may run 8 GPUs; 3 are in use and this order asks for 8."
    )
    assert refused.value.status == 409
    assert Order.objects.count() == 1 and Instance.objects.count() == 3


def test_the_api_answers_409_with_the_quota_message(
    api_as, alice, ada, vision, order_body, catalog
):
    quota_set(project=vision, actor=ada, max_gpus=1)
    response = api_as(alice).post("/api/v1/orders/", order_body(count=2), format="json")
    assert response.status_code == 409
    assert response.json() == {
        "code": "quota_exceeded",
        "detail": "Quota exceeded: vision-lab may run 1 GPUs; 0 are in use and this order "
        "asks for 2.",
    }
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    ("limits", "order", "says"),
    [
        ({"max_instances": 2}, {"count": 3}, "may run 2 hosts; 0 are in use"),
        ({"max_gpus_by_model": {"A10G": 1}}, {"count": 2}, "may run 1 A10G GPUs"),
        (
            {"max_lease_hours": 4},
            {"lease_hours": 5},
            "leases of at most 4 h; this order asks for 5",
        ),
        ({"allowed_instance_types": ["g6.xlarge"]}, {}, "allows only g6.xlarge; g5.xlarge"),
        ({"allowed_markets": {"g5.xlarge": ["spot"]}}, {}, "allows g5.xlarge only on spot"),
    ],
)
def test_each_kind_of_limit_refuses_with_its_own_message(
    place_order, alice, ada, vision, limits, order, says
):
    quota_set(project=vision, actor=ada, **limits)
    with pytest.raises(QuotaExceeded, match=says):
        place_order(alice, **order)


def test_a_member_quota_limits_that_member_only(place_order, alice, bob, ada, vision):
    quota_set(project=vision, actor=ada, user=alice, max_gpus=1)
    place_order(alice)
    with pytest.raises(QuotaExceeded, match="alice in vision-lab may run 1 GPUs"):
        place_order(alice)
    place_order(bob, count=3)  # bob is not bound by alice's limit


def test_lowering_a_quota_below_use_blocks_new_orders_but_kills_nothing(
    running_host, place_order, alice, ada, vision
):
    hosts = [running_host() for _ in range(3)]
    quota_set(project=vision, actor=ada, max_gpus=1)
    with pytest.raises(QuotaExceeded, match="3 are in use \\(already over the limit\\)"):
        place_order(alice)
    assert {Instance.objects.get(pk=h.pk).status for h in hosts} == {S.RUNNING}


def test_every_quota_change_records_who_and_what(ada, vision):
    quota_set(project=vision, actor=ada, max_gpus=8)
    quota_set(project=vision, actor=ada, max_gpus=4)
    quota_set(project=vision, actor=ada, max_gpus=4)  # no change, no record
    changes = list(QuotaChange.objects.order_by("changed_at", "id"))
    assert [(c.before.get("max_gpus"), c.after["max_gpus"]) for c in changes] == [
        (None, 8),
        (8, 4),
    ]
    assert {c.changed_by for c in changes} == {ada}


def test_only_admins_change_quotas(alice, fin, vision):
    for person in (alice, fin):
        with pytest.raises(Forbidden):
            quota_set(project=vision, actor=person, max_gpus=100)


def test_malformed_limits_are_refused(ada, vision):
    with pytest.raises(ValidationError) as error:
        quota_set(project=vision, actor=ada, allowed_markets={"p5.48xlarge": ["reserved"]})
    assert "allowed_markets" in error.value.message_dict


# --- released exactly once, however a host ends ------------------------------------------


def end_by_user_terminate(instance, alice):
    services.instance_request_terminate(instance=instance, user=alice)
    services.instance_cloud_action(instance_id=instance.pk, action="terminate")


def end_by_lease(instance, alice):
    from datetime import timedelta

    from django.utils import timezone

    Instance.objects.filter(pk=instance.pk).update(lease_expires_at=timezone.now() - timedelta(1))
    services.leases_expire()
    services.instance_cloud_action(instance_id=instance.pk, action="terminate")


def end_by_cloud_kill(instance, alice):
    from instances.providers.simulated import SimulatedProvider

    SimulatedProvider().kill(instance.cloud_id)
    services.reconcile()


def end_by_spot_interruption(instance, alice):
    from instances.providers.simulated import SimulatedProvider

    SimulatedProvider().interrupt(instance.cloud_id)
    services.reconcile()


def end_as_ghost(instance, alice):
    from instances.models import SimulatedHost

    SimulatedHost.objects.filter(cloud_id=instance.cloud_id).delete()
    # Missing from the cloud for longer than the ghost grace.
    Instance.objects.filter(pk=instance.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=settings.PORTAL_GHOST_GRACE_SECONDS + 1)
    )
    services.reconcile()


def end_by_failure(instance, alice):
    services.instance_fail(instance_id=instance.pk, reason="no capacity")


ENDINGS = [
    end_by_user_terminate,
    end_by_lease,
    end_by_cloud_kill,
    end_by_spot_interruption,
    end_as_ghost,
]


@pytest.mark.parametrize("end", ENDINGS, ids=lambda f: f.__name__)
def test_each_way_a_host_ends_fired_three_times_lowers_usage_once(
    clock, running_host, alice, vision, end
):
    keep = running_host(market="spot")
    host = running_host(market="spot")
    assert usage(project=vision).gpus == 2
    for _ in range(3):
        # The second and third tries find it already ended: that is the point.
        with contextlib.suppress(services.IllegalTransition):
            end(Instance.objects.get(pk=host.pk), alice)
        assert usage(project=vision).gpus == 1
    assert Instance.objects.get(pk=keep.pk).status == S.RUNNING


def test_a_failed_launch_fired_three_times_lowers_usage_once(place_order, alice, vision):
    place_order(alice)
    doomed = place_order(alice).instances.get()
    assert usage(project=vision).gpus == 2
    for _ in range(3):
        end_by_failure(doomed, alice)
        assert usage(project=vision).gpus == 1
