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


def test_alice_submits_a_cluster_job_and_watches_it_start_on_both_nodes(
    page, sign_in, alice, catalog, settings, tmp_path
):
    from instances.models import Job
    from tests.instances.test_cluster_jobs import launch, start
    from tests.instances.test_jobs import Agent

    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    sign_in("alice")
    page.goto("/jobs/new/")
    page.fill("#id_name", "bert-2x")
    page.fill("#id_command", "python train.py --epochs 20")
    page.select_option("#id_instance_type", "g5.xlarge")
    page.locator("label.segment", has=page.locator("input[value='on_demand']")).click()
    page.fill("#id_nodes", "2")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".flash")).to_contain_text("Job bert-2x submitted")
    expect(page.locator("#job-panel")).to_contain_text("Cluster of 2 × g5.xlarge")

    job = Job.objects.get()
    agents = [Agent(node) for node in launch(job)]
    runs = [agent.ask().json() for agent in agents]
    start(agents, runs)
    # The page polls: both ranks' runs appear, and the job runs.
    expect(page.locator("[data-status]")).to_have_attribute(
        "data-status", "running", timeout=15_000
    )
    expect(page.locator("tr[data-rank]")).to_have_count(2, timeout=15_000)
    expect(page.locator("tr[data-rank='0']")).to_contain_text("chief")
    keep_screenshot(page, "cluster-job")
