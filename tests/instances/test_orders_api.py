"""POST /api/v1/orders/: a researcher orders hosts; bad input is refused and creates nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from instances.models import Instance, InstanceEvent, Order
from tests.conftest import ED25519

URL = "/api/v1/orders/"
PRIVATE = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
# A 1024-bit RSA key: too weak to accept.
RSA_1024 = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDDgBXpjW4hwuGOLzdDDcSGYwvTDXlYjnGp9Cc6oLPhHG2hWZhk"
    "k8TpTsG8fJBhS+z3Y6BY0IaRkCU7mSv4WQJ/oDUsUU+SUz1LBP8FU3Cwz0fsT0KR0aWFUL3mnWGWlbn1TMWQupBd"
    "lS/o9+G3a+58mMN7aQxSE3qSZFYdPfAbeQ== old@box"
)


@pytest.fixture
def as_alice(api_as, alice, catalog):
    return api_as(alice)


def nothing_created():
    return not Order.objects.exists() and not Instance.objects.exists()


def test_alice_orders_two_hosts_and_gets_the_order_with_its_instances(as_alice, order_body):
    response = as_alice.post(URL, order_body(count=2), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["project"] == "vision-lab" and body["requester"] == "alice"
    assert body["instance_type"] == "g5.xlarge" and body["market"] == "on_demand"
    assert body["quoted_price_per_hour"] == "1.006000"
    assert body["estimate"]["per_hour"] == "2.012000"
    assert body["estimate"]["per_day"] == "48.288000"
    assert body["estimate"]["per_lease"] == "16.096000"
    assert body["ssh_key_fingerprint"].startswith("SHA256:")
    assert [i["status"] for i in body["instances"]] == ["requested", "requested"]
    assert response["Location"] == f"/api/v1/orders/{body['id']}/"
    for instance in Instance.objects.all():
        assert instance.client_token == f"portal-{instance.id.hex}"
        event = InstanceEvent.objects.get(instance=instance)
        assert (event.old_status, event.new_status, event.actor) == ("", "requested", "user:alice")


def test_a_spot_order_is_quoted_at_the_current_spot_price(as_alice, order_body, catalog):
    from billing.services.prices import spot_prices_refresh

    spot_prices_refresh()
    catalog["g5.xlarge"].refresh_from_db()
    spot = catalog["g5.xlarge"].spot_price_per_hour
    response = as_alice.post(URL, order_body(market="spot"), format="json")
    assert response.status_code == 201
    body = response.json()
    assert Decimal(body["quoted_price_per_hour"]) == spot
    assert body["interruption_policy"] == "notify"
    assert body["estimate"]["basis"] == "spot price when ordered"


def test_lease_defaults_from_settings(as_alice, order_body, settings):
    settings.PORTAL_LEASE_DEFAULT_HOURS = 12
    response = as_alice.post(URL, order_body(lease_hours=None), format="json")
    assert response.json()["lease_hours"] == 12


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        # A project one is not in and one that does not exist get the same answer.
        ({"project": "nlp-lab"}, "project", "You are not a member of a project called nlp-lab"),
        ({"project": "no-lab"}, "project", "You are not a member of a project called no-lab"),
        ({"instance_type": "x9.huge"}, "instance_type", "x9.huge is not in the catalog"),
        ({"image": "tf-0.1"}, "image", "tf-0.1 is not an image"),
        (
            {"instance_type": "p5.48xlarge", "image": "tf-2.11-cuda11.2"},
            "image",
            "tf-2.11-cuda11.2 does not support the H100 (compute capability 9.0)",
        ),
        ({"count": 0}, "count", "count must be between 1 and 8"),
        ({"count": 9}, "count", "count must be between 1 and 8"),
        ({"count": "many"}, "count", "A valid integer is required"),
        ({"lease_hours": 0}, "lease_hours", "lease_hours must be between 1 and 168"),
        ({"lease_hours": 169}, "lease_hours", "lease_hours must be between 1 and 168"),
        ({"market": "reserved"}, "market", "is not a valid choice"),
        (
            {"instance_type": "p5e.48xlarge", "market": "spot"},
            "market",
            "Spot is not offered for p5e.48xlarge; order it on_demand",
        ),
        ({"ssh_public_key": PRIVATE}, "ssh_public_key", "This is a private key"),
        ({"ssh_public_key": "hello"}, "ssh_public_key", "This is not an OpenSSH public key"),
        ({"ssh_public_key": RSA_1024}, "ssh_public_key", "This RSA key has 1024 bits"),
        ({"ssh_public_key": ED25519 + "\n" + ED25519}, "ssh_public_key", "exactly one"),
        ({"max_spot_price": "2.00"}, "max_spot_price", "applies to spot orders only"),
        (
            {"market": "spot", "max_spot_price": "0"},
            "max_spot_price",
            "must be more than 0",
        ),
        (
            {"market": "spot", "interruption_policy": "pray"},
            "interruption_policy",
            "is not a valid choice",
        ),
        ({"owner": "bob"}, "owner", "owner cannot be set"),
        ({"status": "running"}, "status", "status cannot be set"),
        ({"quoted_price_per_hour": "0.01"}, "quoted_price_per_hour", "cannot be set"),
    ],
)
def test_bad_orders_are_refused_naming_the_field_and_create_nothing(
    as_alice, order_body, overrides, field, says
):
    response = as_alice.post(URL, order_body(**overrides), format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body["fields"], body
    assert says in " ".join(body["fields"][field]), body
    assert body["detail"] and body["code"]
    assert nothing_created()


def test_max_spot_price_below_the_spot_price_is_refused(as_alice, order_body, catalog):
    from billing.services.prices import spot_prices_refresh

    spot_prices_refresh()
    response = as_alice.post(URL, order_body(market="spot", max_spot_price="0.01"), format="json")
    assert response.status_code == 400
    assert "below the current spot price" in response.json()["detail"]
    assert nothing_created()


def test_several_problems_are_reported_at_once(as_alice, order_body):
    response = as_alice.post(
        URL, order_body(count=0, lease_hours=0, ssh_public_key="x"), format="json"
    )
    assert set(response.json()["fields"]) == {"count", "lease_hours", "ssh_public_key"}


def test_the_private_key_is_not_echoed_back(as_alice, order_body):
    response = as_alice.post(URL, order_body(ssh_public_key=PRIVATE), format="json")
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in response.content.decode()


def test_finance_cannot_order(api_as, fin, catalog, projects, order_body):
    response = api_as(fin).post(URL, order_body(), format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    assert nothing_created()


def test_anonymous_cannot_order(api, catalog, order_body):
    assert api.post(URL, order_body(), format="json").status_code in (401, 403)
    assert nothing_created()


def test_the_same_idempotency_key_returns_the_first_order_and_creates_nothing(as_alice, order_body):
    first = as_alice.post(URL, order_body(count=2), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = as_alice.post(URL, order_body(count=2), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1 and Instance.objects.count() == 2


def test_the_same_idempotency_key_with_another_body_is_a_409(as_alice, order_body):
    as_alice.post(URL, order_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    response = as_alice.post(URL, order_body(count=3), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_reused"
    assert Order.objects.count() == 1 and Instance.objects.count() == 1


def test_idempotency_keys_belong_to_their_user(api_as, alice, bob, catalog, order_body):
    first = api_as(alice).post(URL, order_body(), format="json", HTTP_IDEMPOTENCY_KEY="same")
    second = api_as(bob).post(URL, order_body(), format="json", HTTP_IDEMPOTENCY_KEY="same")
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]


def test_orders_list_shows_my_projects_orders_only(api_as, alice, carol, place_order, projects):
    place_order(alice)
    place_order(carol, project=projects["nlp-lab"])
    rows = api_as(alice).get(URL).json()["results"]
    assert [row["project"] for row in rows] == ["vision-lab"]


def test_estimate_endpoint_prices_an_order_before_it_is_placed(as_alice):
    response = as_alice.get(
        f"{URL}estimate/?instance_type=p5.48xlarge&market=on_demand&count=2&lease_hours=10"
    )
    assert response.status_code == 200
    assert response.json()["per_hour"] == "196.640000"
    assert response.json()["per_lease"] == "1966.400000"
    bad = as_alice.get(f"{URL}estimate/?instance_type=x9&count=-1")
    assert bad.status_code == 400
    assert set(bad.json()["fields"]) == {"instance_type", "count"}
