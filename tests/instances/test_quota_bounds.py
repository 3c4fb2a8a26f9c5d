"""A quota's lists hold each name once and a bounded number of names, whoever sets them (the
Quotas page, the API, a script calling quota_set): 60,000 copies of g5.xlarge were once stored,
and the quotas API then answered 1.4 MB. Every list and mapping the API accepts is bounded, and
the schema says so. A counted limit out of its range is refused by quota_set itself, in the
words the page and the API then repeat."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.utils.html import escape

from instances.models import Quota, QuotaChange
from instances.services import quota_set
from instances.services.quotas import quota_limit_rule


def test_repeated_types_are_stored_once_in_the_order_given(ada, projects, catalog):
    quota = quota_set(
        project=projects["vision-lab"],
        actor=ada,
        allowed_instance_types=["g5.xlarge", "p5.48xlarge", "g5.xlarge", "g5.xlarge"],
        allowed_markets={"p5.48xlarge": ["spot", "spot"]},
    )
    quota.refresh_from_db()
    assert quota.allowed_instance_types == ["g5.xlarge", "p5.48xlarge"]
    assert quota.allowed_markets == {"p5.48xlarge": ["spot"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("allowed_instance_types", ["g5.xlarge"] * 60_000),
        ("max_gpus_by_model", {f"model-{n}": 1 for n in range(Quota.MAX_NAMES + 1)}),
        ("allowed_markets", {f"type-{n}": ["spot"] for n in range(Quota.MAX_NAMES + 1)}),
        ("allowed_markets", {"g5.xlarge": ["spot", "spot", "spot"]}),
    ],
)
def test_the_service_refuses_a_list_past_its_bound_and_changes_nothing(
    ada, projects, catalog, field, value
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    with pytest.raises(ValidationError) as refused:
        quota_set(project=projects["vision-lab"], actor=ada, **{field: value})
    assert list(refused.value.error_dict) == [field]
    assert "at most" in refused.value.error_dict[field][0].messages[0]
    assert Quota.objects.get().max_gpus == 8
    assert QuotaChange.objects.count() == 1


def test_the_api_refuses_sixty_thousand_copies_with_a_code_and_stores_nothing(
    api_as, ada, projects, catalog
):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    body = {"allowed_instance_types": ["g5.xlarge"] * 60_000}
    answer = api_as(ada).patch(f"/api/v1/quotas/{quota.pk}/", body, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "max_length"
    assert f"no more than {Quota.MAX_NAMES}" in answer.json()["detail"]
    assert len(answer.content) < 2000
    quota.refresh_from_db()
    assert quota.allowed_instance_types == []


def test_the_api_stores_repeated_types_once(api_as, ada, projects, catalog):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    body = {"allowed_instance_types": ["g5.xlarge"] * 50}
    answer = api_as(ada).patch(f"/api/v1/quotas/{quota.pk}/", body, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["allowed_instance_types"] == ["g5.xlarge"]


def test_the_api_refuses_too_many_gpu_models_as_a_mapping_bound(api_as, ada, projects, catalog):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    body = {"max_gpus_by_model": {f"m{n}": 1 for n in range(Quota.MAX_NAMES + 1)}}
    answer = api_as(ada).patch(f"/api/v1/quotas/{quota.pk}/", body, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "max_length"
    assert answer.json()["fields"] == {
        "max_gpus_by_model": [f"Give at most {Quota.MAX_NAMES} entries."]
    }


def test_the_page_and_the_api_give_the_same_answer_for_a_type_not_in_the_catalog(
    client, api_as, ada, projects, catalog
):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    answer = api_as(ada).patch(
        f"/api/v1/quotas/{quota.pk}/", {"allowed_markets": {"x9.huge": ["spot"]}}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "not_in_catalog"
    said = answer.json()["fields"]["allowed_markets"][0]
    client.force_login(ada)
    page = client.post(
        "/quotas/vision-lab/",
        {"vision-lab-allowed_markets-key": "x9.huge", "vision-lab-allowed_markets-value": "spot"},
    )
    assert page.status_code == 400
    assert said in page.content.decode()
    assert Quota.objects.get().allowed_markets == {}


def _unbounded(schema: dict) -> list[str]:
    """Every array without maxItems and every mapping without maxProperties that a request
    body of the schema accepts, by operation and property."""
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
        if node.get("type") == "array" and "maxItems" not in node:
            found.append(where)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and "maxProperties" not in node:
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


def test_every_list_and_mapping_a_request_accepts_has_a_bound_in_the_schema(api_as, alice):
    schema = json.loads(api_as(alice).get("/api/v1/schema/", {"format": "json"}).content)
    assert _unbounded(schema) == []
    quota = schema["components"]["schemas"]["PatchedQuotaRequest"]["properties"]
    assert quota["allowed_instance_types"]["maxItems"] == Quota.MAX_NAMES
    assert quota["max_gpus_by_model"]["maxProperties"] == Quota.MAX_NAMES


def test_the_migration_keeps_each_stored_name_once(ada, projects):
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    from instances.models import ApprovalPolicy

    # The models as that migration saw them (portal's, before issue 23 moved them to
    # instances); they read and write the same tables.
    apps = MigrationLoader(connection).project_state(("portal", "0007_quota_names_once")).apps

    # Rows as they were stored before quota_set dropped repeats (no service would write them).
    quota = Quota.objects.create(
        project=projects["vision-lab"], allowed_instance_types=["g5.xlarge"] * 500 + ["g6.xlarge"]
    )
    policy = ApprovalPolicy.objects.create(
        project=projects["vision-lab"], instance_types=["p5.48xlarge", "p5.48xlarge"]
    )
    importlib.import_module("portal.migrations.0007_quota_names_once").names_once(apps, None)
    quota.refresh_from_db()
    policy.refresh_from_db()
    assert quota.allowed_instance_types == ["g5.xlarge", "g6.xlarge"]
    assert policy.instance_types == ["p5.48xlarge"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_gpus", -1),
        ("max_instances", -3),
        ("max_lease_hours", 0),
        ("max_gpus", 2**31),
        ("max_instances", True),
        ("max_lease_hours", 2.5),
    ],
)
def test_the_service_refuses_a_bad_limit_with_the_apis_code_and_sentence_and_changes_nothing(
    api_as, ada, projects, catalog, field, value
):
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8, max_lease_hours=24)
    with pytest.raises(ValidationError) as refused:
        quota_set(project=projects["vision-lab"], actor=ada, **{field: value})
    assert list(refused.value.error_dict) == [field]
    (problem,) = refused.value.error_dict[field]
    assert problem.code == "invalid"
    assert problem.messages == [quota_limit_rule(field)]
    assert "whole number from" in problem.messages[0]
    # The API answers the same code and the same sentence, as HTTP 400.
    answer = api_as(ada).patch(f"/api/v1/quotas/{quota.pk}/", {field: value}, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert answer.json()["fields"] == {field: [quota_limit_rule(field)]}
    quota.refresh_from_db()
    assert (quota.max_gpus, quota.max_instances, quota.max_lease_hours) == (8, None, 24)
    assert QuotaChange.objects.count() == 1


def test_the_quotas_page_refuses_a_bad_limit_with_the_services_sentence(
    client, ada, projects, catalog
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    client.force_login(ada)
    for typed in ("-1", "eight"):
        page = client.post("/quotas/vision-lab/", {"vision-lab-max_gpus": typed})
        assert page.status_code == 400
        assert escape(quota_limit_rule("max_gpus")) in page.content.decode()
    assert Quota.objects.get().max_gpus == 8
    assert QuotaChange.objects.count() == 1
