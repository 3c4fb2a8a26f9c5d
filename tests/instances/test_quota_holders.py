"""Who holds a project's quota is on the page that counts it: the dashboard card lists the
holders by user, pool and order; the order page a quota refuses lists them too, keeps Place
order disabled with the reason, and offers the way to ask for more."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from instances.selectors.quotas import holders_of
from instances.services import quota_set

pytestmark = pytest.mark.django_db

ESTIMATE = "/catalog/g5.xlarge/estimate/"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_holders_are_counted_by_user_and_order_most_gpus_first(
    alice, bob, projects, place_order, catalog
):
    small = place_order(alice)
    big = place_order(bob, count=3)
    holders = holders_of([projects["vision-lab"].pk, projects["nlp-lab"].pk])
    vision = holders[projects["vision-lab"].pk]
    assert [(h.username, h.order_id, h.hosts, h.gpus) for h in vision] == [
        ("bob", big.pk, 3, 3),
        ("alice", small.pk, 1, 1),
    ]
    assert holders[projects["nlp-lab"].pk] == []


def test_the_dashboard_card_says_who_holds_the_quota(alice, bob, ada, projects, place_order):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=4)
    place_order(bob, count=3)
    body = text(signed_in(alice).get("/dashboard/"))
    assert "Who holds 3 GPUs on 3 hosts" in body
    assert '<tr data-holder="bob"><td>bob</td>' in body
    assert 'href="/quotas/vision-lab/request/">Request more quota</a>' in body


def test_an_order_the_quota_refuses_cannot_be_placed_and_says_why_and_who_holds_it(
    alice, bob, ada, projects, place_order
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=2)
    place_order(bob, count=2)
    body = text(signed_in(alice).get(ESTIMATE, {"project": "vision-lab", "count": "1"}))
    assert (
        '<button type="submit" form="order-form" class="button primary big place-order" '
        'disabled aria-describedby="order-refusal">Place order</button>'
    ) in body
    assert "Cannot be placed now: Quota exceeded: vision-lab may run 2 GPUs" in body
    assert '<tr data-holder="bob">' in body
    assert 'href="/quotas/vision-lab/request/?gpus=1" data-testid="request-quota"' in body


def test_an_order_the_quota_admits_keeps_place_order_enabled(alice, ada, projects, catalog):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=2)
    body = text(signed_in(alice).get(ESTIMATE, {"project": "vision-lab", "count": "1"}))
    assert 'class="button primary big place-order">Place order</button>' in body
    assert "disabled" not in body and "Request more quota" not in body


@pytest.mark.parametrize(
    "limits",
    [
        {"max_instances": 2},
        {"max_gpus": 40, "max_gpus_by_model": {"A10G": 2}},
        {"max_gpus": 40, "member": 2},
        {"max_gpus": 2, "max_instances": 2},
    ],
    ids=["hosts", "gpus-of-a-model", "a-members-quota", "gpus-and-hosts"],
)
def test_request_more_quota_is_offered_only_where_a_grant_lifts_the_refusal(
    limits, alice, bob, ada, projects, place_order
):
    """A grant raises the project's GPU limit only; "Request more quota" was offered beside a
    refusal by the hosts limit, a per-model limit or the member's own quota, which it leaves,
    and beside the GPU limit's refusal when another limit refuses the order too."""
    member = limits.pop("member", None)
    quota_set(project=projects["vision-lab"], actor=ada, **limits)
    if member:
        quota_set(project=projects["vision-lab"], actor=ada, user=alice, max_gpus=member)
        place_order(alice, count=2)
    else:
        place_order(bob, count=2)
    body = text(signed_in(alice).get(ESTIMATE, {"project": "vision-lab", "count": "1"}))
    assert "Cannot be placed now: Quota exceeded" in body
    assert "Request more quota" not in body
    dashboard = text(signed_in(alice).get("/dashboard/"))
    assert ("Request more quota" in dashboard) == ("max_gpus" in limits)


def test_a_refusal_more_quota_cannot_lift_is_the_one_said(alice, bob, ada, projects, place_order):
    """Over the project's GPU limit and outside the member's allowed types: the page said the
    GPU limit (which a request could raise) and never named the rule that blocks the order."""
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    quota_set(
        project=projects["vision-lab"],
        actor=ada,
        user=alice,
        allowed_instance_types=["p4d.24xlarge"],
    )
    place_order(bob)
    body = text(signed_in(alice).get(ESTIMATE, {"project": "vision-lab", "count": "1"}))
    assert "Cannot be placed now: The quota of" in body
    assert "allows only p4d.24xlarge; g5.xlarge is not among them." in body
    assert "Request more quota" not in body


def test_the_request_is_prefilled_with_what_the_order_lacks(alice, bob, ada, projects, place_order):
    """It was prefilled with the order's GPUs (4), though 2 more let the order in."""
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    place_order(bob, count=6)
    body = text(signed_in(alice).get(ESTIMATE, {"project": "vision-lab", "count": "4"}))
    assert 'href="/quotas/vision-lab/request/?gpus=2" data-testid="request-quota"' in body
