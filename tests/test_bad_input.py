"""Bad input a careless or hostile client sends answers 4xx with the error shape, never a 500,
and each call still leaves its audit row.

A NUL byte in anything looked up (PostgreSQL cannot compare text holding one), an over-long
username at sign-in, dates past the calendar's end, a user filter that would tell who exists,
and a body of thousands of unknown keys.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from axes.models import AccessAttempt

from audit.models import AuditEvent
from instances.models import Order, Quota
from tests.conftest import ED25519, PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(catalog, alice, bob, carol, ada, fin):
    return {"alice": alice, "bob": bob, "carol": carol, "ada": ada, "fin": fin}


def audited(response) -> AuditEvent:
    return AuditEvent.objects.get(request_id=response["X-Request-ID"])


def refused(response, field: str, status: int = 400) -> dict:
    """A 4xx in the error shape that names the field; the call has its audit row."""
    assert response.status_code == status, response.content[:500]
    body = response.json()
    assert set(body) >= {"code", "detail", "fields"}, body
    assert any(name == field or name.startswith(f"{field}.") for name in body["fields"]), body
    assert audited(response).status == status
    return body


# --- NUL bytes -----------------------------------------------------------------------------------

NUL_LOOKUPS = [
    ("/api/v1/instance-types/a%00b/", "name"),
    ("/api/v1/images/a%00b/", "name"),
    ("/api/v1/projects/a%00b/", "slug"),
    ("/api/v1/images/?instance_type=a%00b", "instance_type"),
    ("/api/v1/images/?tensorflow_version=2%00", "tensorflow_version"),
    ("/api/v1/instance-types/?gpu_model=H1%0000", "gpu_model"),
    ("/api/v1/instance-types/?ordering=na%00me", "ordering"),
    ("/api/v1/instances/?project=vision%00lab", "project"),
    ("/api/v1/instances/?instance_type=g5%00", "instance_type"),
    ("/api/v1/orders/?status=%00", "status"),
    ("/api/v1/orders/estimate/?instance_type=g5.x%00large", "instance_type"),
    ("/api/v1/quotas/?project__slug=vision%00lab", "project__slug"),
    ("/api/v1/quotas/?user__username=al%00ice", "user__username"),
    ("/api/v1/costs/?project=vision%00lab", "project"),
    ("/api/v1/costs/?user=al%00ice", "user"),
    ("/api/v1/costs/?instance_type=g5%00", "instance_type"),
    ("/api/v1/costs/?gpu_model=A10G%00", "gpu_model"),
    ("/api/v1/audit/events/?actor=a%00", "actor"),
    ("/api/v1/audit/events/?q=%00", "q"),
    ("/api/v1/projects/?is_active=tr%00ue", "is_active"),
    # A NUL in a parameter's name is named too (shown as \x00).
    ("/api/v1/instance-types/?a%00b=1", "a\\x00b"),
]


@pytest.mark.parametrize(("url", "field"), NUL_LOOKUPS)
def test_a_nul_in_a_lookup_or_filter_answers_400_naming_it(api_as, world, url, field):
    body = refused(api_as(world["ada"]).get(url), field)
    assert body["code"] == "null_characters_not_allowed"
    assert "Null characters are not allowed" in body["fields"][field][0]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"project": "vision\x00lab"}, "project"),
        ({"instance_type": "g5.x\x00large"}, "instance_type"),
        ({"image": "tf-2.17\x00"}, "image"),
        ({"ssh_public_key": ED25519 + "\x00"}, "ssh_public_key"),
        ({"interruption_policy": "\x00"}, "interruption_policy"),
    ],
)
def test_a_nul_in_an_order_answers_400_and_orders_nothing(
    api_as, world, order_body, overrides, field
):
    body = order_body(**overrides)
    response = api_as(world["alice"]).post("/api/v1/orders/", body, format="json")
    refused(response, field)
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"project": "vision\x00lab", "max_gpus": 8}, "project"),
        ({"project": "vision-lab", "member": "al\x00ice", "max_gpus": 8}, "member"),
        ({"project": "vision-lab", "max_gpus_by_model": {"H1\x0000": 4}}, "max_gpus_by_model"),
        ({"project": "vision-lab", "allowed_instance_types": ["g5\x00"]}, "allowed_instance_types"),
        ({"project": "vision-lab", "allowed_markets": {"g5\x00": ["spot"]}}, "allowed_markets"),
    ],
)
def test_a_nul_in_a_quota_answers_400_and_sets_nothing(api_as, world, body, field):
    response = api_as(world["ada"]).post("/api/v1/quotas/", body, format="json")
    refused(response, field)
    assert not Quota.objects.exists()


@pytest.mark.parametrize("field", ["project", "instance_type", "image"])
def test_a_lone_surrogate_in_a_lookup_answers_400(api_as, world, order_body, field):
    """JSON can carry half a UTF-16 pair ("\\ud800"), which no database text can hold."""
    raw = json.dumps(order_body(**{field: "vision\ud800lab"}))
    response = api_as(world["alice"]).post("/api/v1/orders/", raw, content_type="application/json")
    body = refused(response, field)
    assert "Surrogate characters are not allowed" in body["fields"][field][0]
    assert not Order.objects.exists()


# A body that holds half a UTF-16 pair anywhere is refused by the JSON parser, for every
# endpoint: an error that echoed it (an unknown key, a choice) once failed to render (500).
LONE_KEY = '{"\\ud800": 1}'
LONE_VALUE = '{"market": "spot\\udc00"}'


@pytest.fixture
def surrogate_targets(world, place_order):
    from instances.services import quota_set

    order = place_order(world["alice"], market="spot")
    quota = quota_set(project=order.project, actor=world["ada"], max_gpus=8)
    return {
        "order": ("post", "/api/v1/orders/"),
        "pool": ("post", "/api/v1/pools/"),
        "cancel": ("post", f"/api/v1/orders/{order.pk}/cancel/"),
        "quota": ("patch", f"/api/v1/quotas/{quota.pk}/"),
    }


@pytest.mark.parametrize("target", ["order", "pool", "cancel", "quota"])
@pytest.mark.parametrize(
    ("raw", "field", "point"),
    [(LONE_KEY, "\\ud800", "D800"), (LONE_VALUE, "market", "DC00")],
    ids=["key", "value"],
)
def test_a_lone_surrogate_anywhere_in_a_body_answers_400_and_changes_nothing(
    api_as, world, surrogate_targets, target, raw, field, point
):
    method, url = surrogate_targets[target]
    before = (Order.objects.count(), Order.objects.filter(status="cancelled").count())
    quota_before = Quota.objects.values("max_gpus", "updated_at").get()
    client = api_as(world["ada"])
    response = getattr(client, method)(url, raw, content_type="application/json")
    body = refused(response, field)
    assert body["code"] == "surrogate_characters_not_allowed"
    assert body["fields"][field] == [f"Surrogate characters are not allowed: U+{point}."]
    assert (Order.objects.count(), Order.objects.filter(status="cancelled").count()) == before
    assert Quota.objects.values("max_gpus", "updated_at").get() == quota_before


def test_a_lone_surrogate_deep_in_a_body_is_named_by_its_path(api_as, world):
    raw = '{"items": [{"tags": {"ok": "x", "bad": "\\ud83d"}}]}'
    response = api_as(world["alice"]).post("/api/v1/orders/", raw, content_type="application/json")
    body = refused(response, "items.0.tags.bad")
    assert body["fields"] == {"items.0.tags.bad": ["Surrogate characters are not allowed: U+D83D."]}


def test_a_whole_utf16_pair_is_ordinary_text(api_as, world, order_body):
    """An emoji escaped as its pair is one character: an unknown key spelled so is echoed."""
    raw = json.dumps(order_body(**{"\U0001f600": 1}), ensure_ascii=True)
    assert "\\ud83d\\ude00" in raw
    response = api_as(world["alice"]).post("/api/v1/orders/", raw, content_type="application/json")
    body = refused(response, "\U0001f600")
    assert body["code"] == "unknown_field"


def test_a_nul_in_the_token_endpoints_username_answers_400(api, world):
    response = api.post(
        "/api/v1/auth/tokens/", {"username": "al\x00ice", "password": "x"}, format="json"
    )
    refused(response, "username")


def test_a_nul_in_an_idempotency_key_answers_400(api_as, world, order_body):
    response = api_as(world["alice"]).post(
        "/api/v1/orders/", order_body(), format="json", HTTP_IDEMPOTENCY_KEY="k\x00"
    )
    refused(response, "Idempotency-Key")
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "/catalog/g5.x%00large/order/",
        "/catalog/g5.x%00large/estimate/",
        "/costs/?user=al%00ice",
        "/costs/export.csv?project=vision%00lab",
        "/hosts/?status=%00",
        "/audit/?actor=%00",
    ],
)
def test_a_nul_on_a_page_answers_400(client, world, url):
    client.force_login(world["ada"])
    response = client.get(url)
    assert response.status_code == 400
    assert "Null characters are not allowed" in response.content.decode()


def test_a_nul_in_a_page_form_answers_400_and_changes_nothing(client, world):
    client.force_login(world["fin"])
    response = client.post("/budgets/", {"project": "vision\x00lab"})
    assert response.status_code == 400
    assert "project: Null characters are not allowed" in response.content.decode()
    assert audited(response).status == 400


def test_a_nul_in_the_login_form_answers_400(client, world):
    response = client.post("/login/", {"username": "al\x00ice", "password": "x"})
    assert response.status_code == 400
    assert audited(response).status == 400


# --- over-long usernames at sign-in --------------------------------------------------------------

LONG = "a" * 300
# A megabyte (under the request body limit); spaced so that what is measured here is the
# sign-in, not the audit log's scan of it.
HUGE = "a " * 500_000


@pytest.mark.parametrize("username", [LONG, HUGE], ids=["300chars", "1MB"])
def test_an_over_long_username_is_an_ordinary_failed_token_request(api, world, username):
    response = api.post(
        "/api/v1/auth/tokens/", {"username": username, "password": "x"}, format="json"
    )
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_credentials"
    assert AccessAttempt.objects.get().failures_since_start == 1
    assert audited(response).status == 401


@pytest.mark.parametrize("username", [LONG, HUGE], ids=["300chars", "1MB"])
def test_an_over_long_username_is_an_ordinary_failed_sign_in(client, world, username):
    response = client.post("/login/", {"username": username, "password": "x"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert AccessAttempt.objects.get().failures_since_start == 1


def test_over_long_usernames_still_lock_out_at_the_sixth_failure(api, client, world):
    for _ in range(3):
        api.post("/api/v1/auth/tokens/", {"username": LONG, "password": "x"}, format="json")
    for _ in range(2):
        assert client.post("/login/", {"username": LONG, "password": "x"}).status_code == 200
    sixth = api.post("/api/v1/auth/tokens/", {"username": LONG, "password": "x"}, format="json")
    assert sixth.status_code == 429
    assert sixth.json()["code"] == "too_many_attempts"
    # Another over-long name that starts the same is the same account for the lock.
    assert client.post("/login/", {"username": LONG + "z", "password": "x"}).status_code == 429
    # alice is not affected.
    assert client.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302


# --- dates past the calendar ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("start=9999-12-31", "start"),
        ("start=2026-11-01&end=9999-12-31", "end"),
        ("start=0001-01-01&end=0001-01-02", "start"),
        ("start=1999-12-31&end=2000-01-02", "start"),
        ("start=2100-01-01&end=2100-01-02", "start"),
    ],
)
def test_a_date_outside_the_documented_range_answers_400(api_as, world, query, field):
    body = refused(api_as(world["fin"]).get(f"/api/v1/costs/?{query}"), field)
    assert "2000-01-01" in body["fields"][field][0] and "2099-12-31" in body["fields"][field][0]


@pytest.mark.parametrize("page", ["/costs/", "/costs/export.csv"])
def test_a_date_outside_the_range_answers_400_on_the_page_and_csv(client, world, page):
    client.force_login(world["fin"])
    response = client.get(f"{page}?start=9999-12-31")
    assert response.status_code == 400
    assert "2099-12-31" in response.content.decode()


def test_the_edges_of_the_range_are_accepted(api_as, world):
    first = api_as(world["fin"]).get("/api/v1/costs/?start=2000-01-01&end=2000-12-31")
    assert first.status_code == 200, first.json()
    response = api_as(world["fin"]).get(
        "/api/v1/costs/?start=2099-01-01&end=2099-12-31&granularity=week"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["periods"][-1]["period"] == "2099-12-28"


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("9999-12-31T00:00:00Z", "9999-12-31T23:00:00Z"),
        ("0001-01-01T00:00:00Z", "0001-01-01T01:00:00Z"),
        ("2026-11-01T00:00:00Z", "9999-12-31T23:59:59-05:00"),
    ],
)
def test_a_bill_dated_outside_the_range_answers_400(client, world, start, end):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from billing.models import CurImport

    header = "lineItem/LineItemType,lineItem/UsageStartDate,lineItem/UsageEndDate,"
    header += "lineItem/ProductCode,lineItem/UsageType,lineItem/ResourceId,lineItem/UnblendedCost"
    line = f"Usage,{start},{end},AmazonEC2,BoxUsage:g5.xlarge,i-0abc,1.00"
    client.force_login(world["fin"])
    upload = SimpleUploadedFile("cur.csv", f"{header}\n{line}\n".encode(), "text/csv")
    response = client.post("/costs/reconciliation/", {"report": upload})
    assert response.status_code == 400
    assert "not a date and time" in response.content.decode() or "2099-12-31" in (
        response.content.decode()
    )
    assert not CurImport.objects.exists()


def test_a_reconciliation_number_past_any_integer_answers_404(client, world):
    client.force_login(world["fin"])
    assert client.get("/costs/reconciliation/?run=99999999999999999999999").status_code == 404
    assert client.get("/costs/reconciliation.csv?run=99999999999999999999999").status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "since=2520-09-26T06:35:31%2B21:44",  # PostgreSQL refuses offsets past 15:59
        "until=2026-11-30T12:00:00-23:59",
    ],
)
def test_an_audit_time_with_a_wide_offset_is_read_in_utc(api_as, world, query):
    assert api_as(world["ada"]).get(f"/api/v1/audit/events/?{query}").status_code == 200


@pytest.mark.parametrize(
    ("query", "field"),
    [("since=9999-12-31T23:59:59-05:00", "since"), ("until=0001-01-01T00:00:00%2B05:00", "until")],
)
def test_an_audit_time_past_the_calendar_answers_400(api_as, world, query, field):
    body = refused(api_as(world["ada"]).get(f"/api/v1/audit/events/?{query}"), field)
    assert "outside the calendar" in body["fields"][field][0]


def test_the_largest_estimate_is_priced_and_a_larger_one_refused(api_as, world, settings):
    """An estimate takes the bounds an order has (settings), so it prices only orders one
    could place."""
    as_alice = api_as(world["alice"])
    largest = as_alice.get(
        "/api/v1/orders/estimate/?instance_type=p5e.48xlarge&market=spot"
        f"&count={settings.PORTAL_ORDER_MAX_COUNT}&lease_hours={settings.PORTAL_LEASE_MAX_HOURS}"
    )
    assert largest.status_code == 200, largest.content[:300]
    assert Decimal(largest.json()["per_lease"]) > 10_000
    for query, field in (("count=1000", "count"), ("lease_hours=8784", "lease_hours")):
        refused = as_alice.get(f"/api/v1/orders/estimate/?instance_type=p5e.48xlarge&{query}")
        assert refused.status_code == 400, query
        assert field in refused.json()["fields"], refused.json()


# --- the user filter tells nobody who exists -----------------------------------------------------


def test_an_unknown_user_and_one_the_caller_may_not_see_answer_the_same(api_as, world):
    as_alice = api_as(world["alice"])
    unknown = as_alice.get("/api/v1/costs/?user=nosuchuser")
    hidden = as_alice.get("/api/v1/costs/?user=carol")
    assert unknown.status_code == hidden.status_code == 400
    assert unknown.json()["detail"].replace("nosuchuser", "X") == hidden.json()["detail"].replace(
        "carol", "X"
    )
    # Who she may see (herself, bob in her project) still filters.
    assert as_alice.get("/api/v1/costs/?user=bob").status_code == 200
    assert as_alice.get("/api/v1/costs/?user=alice").status_code == 200


def test_finance_gets_the_same_answer_for_an_unknown_user(api_as, world):
    response = api_as(world["fin"]).get("/api/v1/costs/?user=nosuchuser")
    refused(response, "user")
    assert api_as(world["fin"]).get("/api/v1/costs/?user=carol").status_code == 200


# --- error bodies are bounded --------------------------------------------------------------------


def test_thousands_of_unknown_keys_draw_a_small_answer(api_as, world, order_body):
    body = order_body()
    body.update({f"unknown_field_{n:04d}": n for n in range(5000)})
    raw = json.dumps(body)
    assert len(raw) > 79_000
    response = api_as(world["alice"]).post("/api/v1/orders/", raw, content_type="application/json")
    assert response.status_code == 400
    assert len(response.content) < 8_000, len(response.content)
    answer = response.json()
    assert answer["code"] == "unknown_field"
    assert len(answer["fields"]) == 20
    assert answer["omitted_fields"] == 4980
    assert "4980 more fields not shown" in answer["detail"]
    assert not Order.objects.exists()
    assert audited(response).status == 400


def test_a_huge_field_name_and_message_are_cut(api_as, world):
    response = api_as(world["ada"]).post(
        "/api/v1/quotas/",
        {"project": "vision-lab", "max_gpus_by_model": {"Z " * 50_000: 1}},
        format="json",
    )
    assert response.status_code == 400
    assert len(response.content) < 4_000
