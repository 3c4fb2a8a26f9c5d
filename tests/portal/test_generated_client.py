"""A client generated from the schema is one a person can use: openapi-python-client builds it
from /api/v1/schema/ into a temporary folder, and it places an order and lists hosts with plain
strings, booleans and numbers, in process against the portal's WSGI application.

The schema says what a client sends: optional query parameters are plain (an empty value is
``allowEmptyValue``, not a one-value enum), yes/no filters are booleans, and names from the
catalog are strings the server checks, so a catalog sync does not change the schema.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator

from instances.models import Order
from portal.services import token_issue
from tests.conftest import ED25519

pytestmark = pytest.mark.django_db

PACKAGE = "portal_api_client"


def _query_parameters(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    yield f"{method.upper()} {path} {parameter['name']}", parameter


@pytest.fixture
def schema(catalog) -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.fixture
def in_process():
    """Django's WSGI handler closes the database connection around each request; the test's
    transaction lives on that connection, so keep it open (as Django's test client does)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def generated(schema, tmp_path: Path):
    """The client package openapi-python-client writes from the schema, imported from tmp_path."""
    (tmp_path / "schema.json").write_text(json.dumps(schema, default=str))
    (tmp_path / "config.yaml").write_text("post_hooks: []\n")
    tool = Path(sys.executable).with_name("openapi-python-client")
    run = subprocess.run(
        [
            str(tool),
            "generate",
            "--path",
            "schema.json",
            "--meta",
            "none",
            "--output-path",
            PACKAGE,
            "--config",
            "config.yaml",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Warning" not in run.stdout, run.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def _client(package, user):
    _, secret = token_issue(user=user, name="generated client")
    return package.AuthenticatedClient(
        base_url="http://testserver",
        token=secret,
        httpx_args={"transport": httpx.WSGITransport(app=get_wsgi_application())},
    )


def test_query_parameters_are_plain_optional_values(schema):
    parameters = dict(_query_parameters(schema))
    unions = [name for name, p in parameters.items() if {"anyOf", "oneOf"} & set(p["schema"])]
    blank_enums = [name for name, p in parameters.items() if "" in p["schema"].get("enum", ())]
    assert not unions
    assert not blank_enums
    assert parameters["GET /api/v1/instances/ page"]["allowEmptyValue"] is True
    assert parameters["GET /api/v1/costs/ group_by"]["allowEmptyValue"] is True


def test_yes_no_filters_are_booleans(schema):
    parameters = dict(_query_parameters(schema))
    for name in (
        "GET /api/v1/instances/ mine",
        "GET /api/v1/instance-types/ spot_offered",
        "GET /api/v1/projects/ is_active",
    ):
        assert parameters[name]["schema"] == {"type": "boolean"}, name


def test_catalog_names_are_strings_not_enums_of_todays_catalog(schema):
    parameters = dict(_query_parameters(schema))
    assert parameters["GET /api/v1/images/ instance_type"]["schema"]["type"] == "string"
    assert "enum" not in parameters["GET /api/v1/images/ instance_type"]["schema"]
    assert "enum" not in parameters["GET /api/v1/instance-types/ gpu_model"]["schema"]["items"]
    assert "g5.xlarge" not in json.dumps(schema)
    assert '"A10G"' not in json.dumps(schema)


def test_a_generated_client_orders_a_host_and_lists_it_with_plain_filters(
    generated, in_process, alice
):
    from portal_api_client.api.images import images_list
    from portal_api_client.api.instance_types import instance_types_list
    from portal_api_client.api.instances import instances_list
    from portal_api_client.api.orders import orders_create
    from portal_api_client.models import MarketEnum, OrderCreateRequest

    client = _client(generated, alice)
    placed = orders_create.sync_detailed(
        client=client,
        body=OrderCreateRequest(
            project="vision-lab",
            instance_type="g5.xlarge",
            image="tf-2.17-cuda12.3",
            market=MarketEnum.ON_DEMAND,
            ssh_public_key=ED25519,
            lease_hours=8,
        ),
    )
    assert placed.status_code == 201, placed.content
    assert Order.objects.get().requester == alice

    hosts = instances_list.sync(
        client=client, project="vision-lab", instance_type="g5.xlarge", mine=True, page=1
    )
    assert hosts.count == 1
    assert hosts.results[0].instance_type == "g5.xlarge"
    assert instances_list.sync(client=client, mine=False, instance_type="p5.48xlarge").count == 0

    types = instance_types_list.sync(client=client, gpu_model=["a10g"], spot_offered=True)
    assert types.count >= 1
    assert {row.gpu_model for row in types.results} == {"A10G"}
    images = images_list.sync(client=client, instance_type="g5.xlarge", page_size=100)
    assert "tf-2.17-cuda12.3" in {image.name for image in images.results}


def test_a_generated_client_gets_the_servers_refusal_for_an_unknown_name(
    generated, in_process, alice
):
    from portal_api_client.api.instance_types import instance_types_list

    answer = instance_types_list.sync_detailed(client=_client(generated, alice), gpu_model=["Z80"])
    assert answer.status_code == 400
    assert "Z80 is not a GPU model in the catalog" in answer.parsed.detail
