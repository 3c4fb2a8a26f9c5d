"""What a write takes is what it says: a field it does not know is refused (400, unknown_field)
rather than dropped, a yes/no field takes only JSON true or false, and an action that takes no
input refuses a body. Each answer changes nothing. One base (portal.lib.rest.RejectUnknownFields)
does it for every write serializer; the schema walk below holds every request body to it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from instances import services
from instances.models import GpuReading, IdlePolicy, Instance, Quota
from instances.services import quota_set
from portal.models import ApiToken
from tests.conftest import PASSWORD
from tests.instances.pool_helpers import make_pool  # noqa: F401


def _agent(api, instance):
    secret = services.agent_credential_issue(instance=instance)
    api.credentials(HTTP_AUTHORIZATION=f"Agent {secret}")
    return api


def _reading(clock, **extra) -> dict:
    at = (clock.now - timedelta(minutes=1)).isoformat()
    return {"at": at, "utilization": 40, "memory_used_mib": 900, **extra}


def test_readings_naming_another_host_are_refused_not_stored(clock, api, running_host):
    mine, other = running_host(), running_host()
    answer = _agent(api, mine).post(
        f"/api/v1/instances/{mine.pk}/metrics/",
        {"readings": [_reading(clock)], "instance_id": str(other.pk)},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_field"
    assert "instance_id cannot be set; this endpoint accepts readings." in answer.json()["detail"]
    assert not GpuReading.objects.exists()


def test_a_reading_with_a_field_the_portal_does_not_keep_is_refused(clock, api, running_host):
    host = running_host()
    answer = _agent(api, host).post(
        f"/api/v1/instances/{host.pk}/metrics/",
        {"readings": [_reading(clock, temperature_c=71)]},
        format="json",
    )
    assert answer.status_code == 400
    assert list(answer.json()["fields"]) == ["readings.0.temperature_c"]
    assert not GpuReading.objects.exists()


@pytest.mark.parametrize("enabled", [0, 1, "yes", "true", "on"])
def test_the_idle_policy_takes_only_true_or_false_for_enabled(api_as, ada, projects, enabled):
    url = "/api/v1/projects/vision-lab/idle-policy/"
    answer = api_as(ada).put(url, {"enabled": enabled}, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert answer.json()["fields"] == {"enabled": ["enabled is true or false."]}
    assert not IdlePolicy.objects.exists()
    assert api_as(ada).put(url, {"enabled": False}, format="json").status_code == 200


def test_a_pool_schedule_takes_only_true_or_false_for_enabled(api_as, alice, make_pool):  # noqa: F811
    pool = make_pool()
    schedule = services.schedule_create(pool=pool, user=alice, cron="0 9 * * *", desired=1)
    answer = api_as(alice).patch(
        f"/api/v1/pools/{pool.pk}/schedules/{schedule.pk}/", {"enabled": 0}, format="json"
    )
    assert answer.status_code == 400
    schedule.refresh_from_db()
    assert schedule.enabled is True


def test_keep_running_refuses_a_body_and_holds_nothing(api_as, running_host, alice, projects):
    IdlePolicy.objects.create(project=projects["vision-lab"], snooze_hours=3)
    host = running_host()
    answer = api_as(alice).post(
        f"/api/v1/instances/{host.pk}/keep-running/", {"hours": 72}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_field"
    assert "hours cannot be set; send no body." in answer.json()["detail"]
    assert Instance.objects.get(pk=host.pk).idle_snoozed_until is None


def test_stop_refuses_a_body_and_the_host_keeps_running(api_as, running_host, alice):
    host = running_host()
    answer = api_as(alice).post(
        f"/api/v1/instances/{host.pk}/stop/", {"force": True}, format="json"
    )
    assert answer.status_code == 400
    assert Instance.objects.get(pk=host.pk).status == Instance.Status.RUNNING


def test_a_misspelt_quota_field_is_refused_not_dropped(api_as, ada, projects, catalog):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    answer = api_as(ada).patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpu": 4}, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_field"
    assert Quota.objects.get().max_gpus == 8


def test_a_token_request_for_someone_else_is_refused(api, alice, bob):
    answer = api.post(
        "/api/v1/auth/tokens/",
        {"username": "alice", "password": PASSWORD, "name": "x", "user": "bob"},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["fields"]["user"][0].startswith("user cannot be set")
    assert not ApiToken.objects.exists()


def test_a_budget_with_a_misspelt_field_is_refused(api_as, fin, projects):
    answer = api_as(fin).put(
        "/api/v1/budgets/vision-lab/",
        {"monthly_amount": "100", "threshold": [50]},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_field"


def _open_objects(schema: dict) -> list[str]:
    """Every object a request body takes (nested ones too) that does not refuse unknown
    fields (``additionalProperties`` missing), by operation and property."""
    components = schema["components"]["schemas"]
    found: list[str] = []

    def walk(node, where: str, seen: frozenset) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where, seen)
            return
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if name not in seen:
                walk(components[name], name, seen | {name})
            return
        if "properties" in node and "additionalProperties" not in node:
            found.append(where)
        for key, value in node.items():
            if key == "properties":
                for name, inner in value.items():
                    walk(inner, f"{where}.{name}", seen)
            else:
                walk(value, where, seen)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for content in operation.get("requestBody", {}).get("content", {}).values():
                walk(content["schema"], f"{method} {path}", frozenset())
    return sorted(set(found))


def test_every_request_body_refuses_unknown_fields_in_the_schema(api_as, alice):
    schema = json.loads(api_as(alice).get("/api/v1/schema/", {"format": "json"}).content)
    assert _open_objects(schema) == []
