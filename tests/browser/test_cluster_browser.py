"""Alice orders a two-node p4d cluster in the browser and finds, on a node's page, the other
node and the TF_CONFIG exports MultiWorkerMirroredStrategy reads."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from instances import services
from instances.models import Instance
from tests.browser.conftest import keep_screenshot
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_orders_a_cluster_and_reads_its_tf_config_on_a_node(page, sign_in, alice, catalog):
    sign_in("alice")
    page.goto("/catalog/p4d.24xlarge/order/")
    page.locator("label.segment", has_text="One cluster").click()
    expect(page.get_by_test_id("placement-hint")).to_contain_text("all or none")
    expect(page.get_by_test_id("placement-hint")).to_contain_text("4 EFA interfaces")
    page.fill("#id_count", "2")
    expect(page.locator("#estimate")).to_contain_text("16")  # GPUs: 2 nodes of 8
    page.fill("#id_ssh_public_key", ED25519)
    keep_screenshot(page, "cluster-order")
    page.get_by_role("button", name="Place order").click()
    expect(page.locator(".flash")).to_contain_text("a cluster of 2× p4d.24xlarge")

    nodes = list(Instance.objects.order_by("rank"))
    assert [node.rank for node in nodes] == [0, 1]
    page.goto(f"/hosts/{nodes[1].pk}/")
    card = page.get_by_test_id("cluster")
    expect(card.get_by_role("heading")).to_have_text("Cluster of 2 nodes: this is rank 1")
    expect(card.get_by_test_id("tf-config-pending")).to_be_visible()

    for node in nodes:
        services.instance_provision(instance_id=node.pk)
    # The panel polls: once both nodes run, the exports appear without a reload.
    exports = card.locator("#cluster-exports")
    expect(exports).to_contain_text("export TF_CONFIG=", timeout=15_000)
    line = next(x for x in exports.inner_text().splitlines() if x.startswith("export TF_CONFIG="))
    config = json.loads(line.removeprefix("export TF_CONFIG=").strip("'"))
    assert config["task"] == {"type": "worker", "index": 1}
    assert len(config["cluster"]["worker"]) == 2
    expect(card.locator("tbody tr")).to_have_count(2)
    expect(card.get_by_role("link", name=nodes[0].name)).to_be_visible()
    keep_screenshot(page, "cluster-node")
