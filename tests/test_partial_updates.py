"""A PATCH changes only what it names: every PATCH endpoint of the schema is walked, one field
at a time, and every other field must read back as it was (a PATCH of a quota's max_gpus once
emptied its per-model limits, and 24 H100s were then admitted against a 16-H100 limit)."""

from __future__ import annotations

import pytest

from instances import services
from instances.models import Quota
from instances.services import quota_set
from portal.services import project_isolation_set, webhook_create
from tests.instances.pool_helpers import make_pool  # noqa: F401

# Per PATCH path: a value for each field it accepts, each unlike the one the object starts
# with (see _objects), and the fields read back that follow from others (times, history,
# words), which a change may move.
QUOTA = {
    "max_gpus": 40,
    "max_gpus_by_model": {"A10G": 4},
    "max_instances": 7,
    "max_lease_hours": 12,
    "allowed_instance_types": ["g5.xlarge"],
    "allowed_markets": {"g5.xlarge": ["on_demand"]},
}
POOL = {
    "min_size": 2,
    "desired": 4,
    "max_size": 7,
    "on_demand_base": 3,
    "spot_percent": 20,
    "interruption_policy": "notify",
    "target_gpu_utilization": 55,
    "scale_out_minutes": 9,
    "scale_in_minutes": 45,
    "cooldown_minutes": 12,
    "warmup_minutes": 8,
}
SCHEDULE = {
    "cron": "30 7 * * 1-5",
    "timezone": "Europe/Paris",
    "min_size": 2,
    "max_size": 6,
    "desired": 4,
    "enabled": False,
}
WEBHOOK = {
    "url": "https://hooks.example.org/other",
    "events": ["host.failed", "job.failed"],
    "description": "on call",
    "is_active": False,
}
PROJECT = {
    "subnet_ids": ["subnet-1b2c3d4e5f678901a"],
    "security_group_ids": ["sg-0123456789abcdef1"],
    "kms_key_id": "alias/vision-lab-2",
    "tenancy": "dedicated",
    "host_id": "h-0fedcba9876543211",
    "instance_profile": "vision-hosts-2",
    "mig_pool": "portal",
}
WALKED = {
    # Leaving host tenancy drops the host id with it (docs/admins.md).
    "/api/v1/projects/{slug}/": (PROJECT, {"launches_with", "host_id"}),
    "/api/v1/quotas/{id}/": (QUOTA, {"updated_at", "updated_by", "changes"}),
    "/api/v1/pools/{id}/": (POOL, {"events"}),
    "/api/v1/pools/{id}/schedules/{sid}/": (
        SCHEDULE,
        {"description", "next_runs", "last_run_at"},
    ),
    "/api/v1/webhooks/{id}/": (WEBHOOK, {"updated_at"}),
}
# What names the object rather than sets it: a quota's project and member are its key.
KEYS = {"/api/v1/quotas/{id}/": {"project", "member"}}
# A field walked on another object than its path's others: only a project without isolation
# of its own (nlp-lab has all of it) may join the portal's MIG pool.
ELSEWHERE = {("/api/v1/projects/{slug}/", "mig_pool"): "/api/v1/projects/vision-lab/"}


def _patch_operations(api) -> dict[str, set[str]]:
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()
    found = {}
    for path, operations in schema["paths"].items():
        if "patch" in operations:
            ref = operations["patch"]["requestBody"]["content"]["application/json"]["schema"]
            body = schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
            found[path] = set(body["properties"]) - KEYS.get(path, set())
    return found


def test_every_patch_endpoint_and_every_field_it_accepts_is_walked(api_as, alice):
    walked = {path: set(values) for path, (values, _) in WALKED.items()}
    assert _patch_operations(api_as(alice)) == walked


@pytest.fixture
def objects(ada, alice, catalog, projects, make_pool):  # noqa: F811
    """One object behind each PATCH path, every field set to something else than WALKED."""
    vision = projects["vision-lab"]
    quota = quota_set(
        project=vision,
        actor=ada,
        max_gpus=32,
        max_gpus_by_model={"H100": 16},
        max_instances=10,
        max_lease_hours=48,
        allowed_instance_types=["p5.48xlarge", "g5.xlarge"],
        allowed_markets={"p5.48xlarge": ["spot"]},
    )
    pool = make_pool(
        min_size=1,
        desired=3,
        max_size=8,
        on_demand_base=1,
        spot_percent=50,
        interruption_policy="fallback_on_demand",
        target_gpu_utilization=70,
        scale_out_minutes=5,
        scale_in_minutes=30,
        cooldown_minutes=10,
        warmup_minutes=5,
    )
    schedule = services.schedule_create(
        pool=pool, user=alice, cron="0 9 * * *", timezone="UTC", min_size=1, max_size=8, desired=3
    )
    webhook, _ = webhook_create(
        actor=ada,
        project=vision,
        url="https://hooks.example.org/gpu",
        events=["order.placed"],
        description="lab chat",
    )
    project_isolation_set(
        project=projects["nlp-lab"],
        actor=ada,
        subnet_ids=["subnet-0a1b2c3d4e5f67890"],
        security_group_ids=["sg-0123456789abcdef0"],
        kms_key_id="alias/vision-lab",
        tenancy="host",
        host_id="h-0fedcba9876543210",
        instance_profile="vision-hosts",
    )
    return {
        "/api/v1/projects/{slug}/": (ada, "/api/v1/projects/nlp-lab/"),
        "/api/v1/webhooks/{id}/": (ada, f"/api/v1/webhooks/{webhook.pk}/"),
        "/api/v1/quotas/{id}/": (ada, f"/api/v1/quotas/{quota.pk}/"),
        "/api/v1/pools/{id}/": (alice, f"/api/v1/pools/{pool.pk}/"),
        "/api/v1/pools/{id}/schedules/{sid}/": (
            alice,
            f"/api/v1/pools/{pool.pk}/schedules/{schedule.pk}/",
        ),
    }


@pytest.mark.parametrize(
    ("path", "field"),
    [(path, field) for path, (values, _) in WALKED.items() for field in values],
)
def test_a_patch_of_one_field_leaves_every_other_field_as_it_was(
    api_as, objects, path, field, clock
):
    user, url = objects[path]
    url = ELSEWHERE.get((path, field), url)
    values, derived = WALKED[path]
    api = api_as(user)
    before = api.get(url).json()
    assert before[field] != values[field], "the walk must send a new value"
    answer = api.patch(url, {field: values[field]}, format="json")
    assert answer.status_code == 200, answer.json()
    after = api.get(url).json()
    assert after[field] == values[field]
    unchanged = set(before) - derived - {field}
    assert {name: after[name] for name in unchanged} == {name: before[name] for name in unchanged}


def test_a_quota_patch_of_max_gpus_keeps_its_h100_limit_and_its_history_says_only_that(
    api_as, objects, ada
):
    _, url = objects["/api/v1/quotas/{id}/"]
    api_as(ada).patch(url, {"max_gpus": 40}, format="json")
    quota = Quota.objects.get(project__slug="vision-lab", user=None)
    assert quota.max_gpus_by_model == {"H100": 16}
    latest = quota.changes.order_by("-changed_at", "-id").first()
    assert latest.before["max_gpus_by_model"] == latest.after["max_gpus_by_model"] == {"H100": 16}
