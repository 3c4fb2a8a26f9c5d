"""Fields a caller must not set are refused (400) or ignored, and the database is unchanged."""

from __future__ import annotations

import pytest
from django.forms.models import model_to_dict

from instances.models import Instance, Order, Quota
from instances.services import quota_set
from portal.models import ApiToken
from portal.services import token_issue
from tests.conftest import PASSWORD

FORBIDDEN_ORDER_FIELDS = {
    "requester": "bob",
    "owner": "bob",
    "status": "running",
    "quoted_price_per_hour": "0.000001",
    "client_token": "portal-mine",
    "cloud_id": "i-0123456789abcdef0",
    "id": "00000000-0000-4000-8000-000000000000",
    "region": "cn-north-1",
}


def snapshot():
    return {
        "orders": [model_to_dict(o) for o in Order.objects.order_by("pk")],
        "instances": [model_to_dict(i) for i in Instance.objects.order_by("pk")],
        "quotas": [model_to_dict(q) for q in Quota.objects.order_by("pk")],
        "tokens": [model_to_dict(t) for t in ApiToken.objects.order_by("pk")],
    }


@pytest.mark.parametrize(("field", "value"), sorted(FORBIDDEN_ORDER_FIELDS.items()))
def test_an_order_cannot_set_what_the_portal_decides(
    api_as, alice, running_host, order_body, field, value
):
    running_host()
    before = snapshot()
    response = api_as(alice).post("/api/v1/orders/", order_body(**{field: value}), format="json")
    assert response.status_code == 400
    assert f"{field} cannot be set" in response.json()["detail"]
    assert snapshot() == before


@pytest.mark.parametrize("method", ["put", "patch"])
@pytest.mark.parametrize(
    "body",
    [{"status": "terminated"}, {"owner": "bob"}, {"cloud_id": "i-x"}, {"public_ip": "1.1.1.1"}],
)
def test_hosts_cannot_be_edited_through_the_api(api_as, alice, ada, running_host, method, body):
    host = running_host()
    before = snapshot()
    for person in (alice, ada):
        response = getattr(api_as(person), method)(
            f"/api/v1/instances/{host.pk}/", body, format="json"
        )
        assert response.status_code == 405
    assert snapshot() == before


def test_a_quota_update_ignores_who_changed_it_and_what_is_in_use(api_as, ada, bob, projects):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    response = api_as(ada).patch(
        f"/api/v1/quotas/{quota.pk}/",
        {
            "max_gpus": 9,
            "updated_by": "bob",
            "in_use": {"gpus": 0},
            "over_limit": False,
            "project": "nlp-lab",
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    quota.refresh_from_db()
    assert (quota.max_gpus, quota.updated_by, quota.project.slug) == (9, ada, "vision-lab")


def test_a_researcher_cannot_change_a_quota(api_as, alice, ada, projects):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    before = snapshot()
    response = api_as(alice).patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 800}, format="json")
    assert response.status_code == 403
    assert snapshot() == before


def test_a_token_cannot_be_issued_for_someone_else_or_backdated(api, alice, bob):
    response = api.post(
        "/api/v1/auth/tokens/",
        {
            "username": "alice",
            "password": PASSWORD,
            "name": "x",
            "user": "bob",
            "expires_at": "2099-01-01T00:00:00Z",
            "digest": "0" * 64,
        },
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_field"
    assert set(response.json()["fields"]) == {"user", "expires_at", "digest"}
    assert not ApiToken.objects.exists()


def test_tokens_cannot_be_edited(api_as, alice):
    token, _ = token_issue(user=alice, name="x")
    before = snapshot()
    response = api_as(alice).patch(f"/api/v1/auth/tokens/{token.pk}/", {"name": "y"}, format="json")
    assert response.status_code == 405
    assert snapshot() == before
