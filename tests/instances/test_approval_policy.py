"""A project's managers set its approval policy on a page of its own and in the API, through
approval_policy_set; admins keep the Quotas page's form too. A member who does not manage the
project gets 403, a stranger to it 404, and a refusal changes nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from instances.models import ApprovalPolicy, Order
from portal.models import Membership
from portal.services import membership_set

PAGE = "/projects/vision-lab/approval-policy/"
API = "/api/v1/projects/vision-lab/approval-policy/"


@pytest.fixture
def bob_manages(bob, projects):
    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    return bob


def _form(**values) -> dict:
    fields = {"gpus_above": "", "on_demand_price_above": "", "expire_after_days": "3"}
    fields.update(values)
    return fields


def test_a_manager_sets_the_policy_on_the_page_and_orders_then_wait(
    client, bob_manages, alice, catalog, place_order
):
    client.force_login(bob_manages)
    assert client.get(PAGE).status_code == 200
    answer = client.post(PAGE, _form(gpus_above="2", instance_types="p5.48xlarge"))
    assert answer.status_code == 302
    assert answer["Location"] == PAGE
    policy = ApprovalPolicy.objects.get()
    assert (policy.gpus_above, policy.instance_types, policy.updated_by) == (
        2,
        ["p5.48xlarge"],
        bob_manages,
    )
    assert "Saved the approval policy of vision-lab." in client.get(PAGE).content.decode()
    assert place_order(alice, count=4).status == Order.Status.PENDING_APPROVAL


def test_a_refused_page_save_says_it_at_the_field_and_keeps_the_old_policy(
    client, bob_manages, catalog
):
    client.force_login(bob_manages)
    client.post(PAGE, _form(gpus_above="2"))
    answer = client.post(PAGE, _form(gpus_above="4", expire_after_days="90"))
    assert answer.status_code == 400
    assert 'id="id_expire_after_days-error"' in answer.content.decode()
    assert ApprovalPolicy.objects.get().gpus_above == 2


def test_a_member_gets_403_and_a_stranger_404_on_the_page(client, alice, carol, catalog):
    client.force_login(alice)
    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, _form(gpus_above="0")).status_code == 403
    client.force_login(carol)
    assert client.get(PAGE).status_code == 404
    assert client.post(PAGE, _form(gpus_above="0")).status_code == 404
    assert not ApprovalPolicy.objects.exists()


def test_an_admin_uses_the_page_as_well_as_the_quotas_page(client, ada, projects, catalog):
    client.force_login(ada)
    assert client.post(PAGE, _form(gpus_above="8")).status_code == 302
    assert ApprovalPolicy.objects.get().gpus_above == 8


def test_a_manager_puts_the_policy_in_the_api_and_what_is_left_out_stays(
    api_as, bob_manages, catalog
):
    api = api_as(bob_manages)
    assert api.get(API).json()["updated_at"] is None
    first = api.put(
        API,
        {"gpus_above": 2, "instance_types": ["p5.48xlarge", "p5.48xlarge"]},
        format="json",
    )
    assert first.status_code == 200, first.json()
    answer = api.put(API, {"on_demand_price_above": "12.50"}, format="json")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["project"] == "vision-lab"
    assert body["gpus_above"] == 2
    assert body["instance_types"] == ["p5.48xlarge"]
    assert body["on_demand_price_above"] == "12.500000"
    assert body["updated_by"] == "bob"
    assert ApprovalPolicy.objects.get().on_demand_price_above == Decimal("12.5")


def test_members_read_the_policy_but_only_managers_and_admins_change_it(
    api_as, alice, carol, ada, projects, catalog
):
    assert api_as(alice).get(API).status_code == 200
    refused = api_as(alice).put(API, {"gpus_above": 0}, format="json")
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"
    assert api_as(carol).get(API).status_code == 404
    assert api_as(carol).put(API, {"gpus_above": 0}, format="json").status_code == 404
    assert not ApprovalPolicy.objects.exists()
    assert api_as(ada).put(API, {"gpus_above": 0}, format="json").status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"instance_types": ["x9.huge"]}, "instance_types", "not_in_catalog"),
        ({"expire_after_days": 0}, "expire_after_days", "min_value"),
        ({"gpus_above": -1}, "gpus_above", "min_value"),
        ({"gpus": 4}, "gpus", "unknown_field"),
        ({"instance_types": ["g5.xlarge"] * 101}, "instance_types", "max_length"),
    ],
)
def test_bad_policy_input_answers_400_naming_the_field(
    api_as, bob_manages, catalog, body, field, code
):
    answer = api_as(bob_manages).put(API, body, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == code
    assert list(answer.json()["fields"]) == [field]
    assert not ApprovalPolicy.objects.exists()


def test_the_schema_documents_the_approval_policy(api_as, alice):
    schema = api_as(alice).get("/api/v1/schema/", {"format": "json"}).json()
    operations = schema["paths"]["/api/v1/projects/{slug}/approval-policy/"]
    assert set(operations) >= {"get", "put"}
    body = schema["components"]["schemas"]["ApprovalPolicyInputRequest"]
    assert body["additionalProperties"] is False
    assert body["properties"]["instance_types"]["maxItems"] == 100
