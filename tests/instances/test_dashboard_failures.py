"""The admin dashboard's "failed or interrupted in the last 24 h": counted from the hosts'
timelines (an interrupted spot host is terminated in the same reconcile pass), each host once,
only within the day and the viewer's projects, in a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from django.db import connection
from django.test.utils import CaptureQueriesContext

from instances import services
from instances.models import Instance
from instances.panels import operations_panel
from instances.providers.simulated import SimulatedProvider

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _spot(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""


def interrupted(running_host, user) -> Instance:
    """A spot host the cloud takes back without warning, seen by the reconciler."""
    host = running_host(user, market="spot", interruption_policy="notify")
    SimulatedProvider().interrupt(host.cloud_id)
    services.reconcile()
    host.refresh_from_db()
    return host


def failed(place_order, user, **overrides) -> Instance:
    host = place_order(user, **overrides).instances.get()
    row, _ = services.instance_transition(
        instance=host, to=Instance.Status.FAILED, reason="no capacity", actor="system:test"
    )
    return row


def failures_line(client, ada) -> str:
    client.force_login(ada)
    html = BeautifulSoup(client.get("/dashboard/").content, "html.parser")
    panel = html.select_one('[data-panel="operations"]')
    (line,) = [p for p in panel.select("p.small.muted") if "live host" in p.text]
    return " ".join(line.text.split())


def test_a_spot_loss_walked_on_to_terminated_still_counts(client, clock, ada, alice, running_host):
    host = interrupted(running_host, alice)
    assert host.status == Instance.Status.TERMINATED
    assert host.events.filter(new_status=Instance.Status.INTERRUPTED).exists()
    assert "1 failed or interrupted in the last 24 h" in failures_line(client, ada)


def test_each_host_counts_once_and_only_within_the_day(
    client, clock, ada, alice, carol, projects, place_order, running_host
):
    failed(place_order, alice)  # a day and more ago: not counted
    clock.shift(timedelta(hours=25))
    failed(place_order, alice)
    interrupted(running_host, alice)
    interrupted(running_host, alice)
    failed(place_order, carol, project=projects["nlp-lab"])
    assert "4 failed or interrupted in the last 24 h" in failures_line(client, ada)
    # Only the projects the panel is built for.
    vision = operations_panel(ada, [projects["vision-lab"]])
    assert vision.context["failed"] == 3
    assert operations_panel(ada, [projects["nlp-lab"]]).context["failed"] == 1
    clock.shift(timedelta(hours=24, seconds=1))
    assert operations_panel(ada, list(projects.values())).context["failed"] == 0


def test_the_count_costs_the_same_queries_for_1_failure_as_for_5(
    clock, ada, alice, projects, place_order, running_host
):
    def cost() -> int:
        with CaptureQueriesContext(connection) as captured:
            operations_panel(ada, list(projects.values()))
        return len(captured.captured_queries)

    interrupted(running_host, alice)
    one = cost()
    for _ in range(2):
        interrupted(running_host, alice)
        failed(place_order, alice)
    assert operations_panel(ada, list(projects.values())).context["failed"] == 5
    assert cost() == one


def test_a_note_on_an_old_failure_is_no_new_failure(ada, alice, projects, place_order, clock):
    """A timeline note records the same old and new status (a "replaced by" note on a host that
    failed days ago): it was counted as a failure today."""
    from instances.services.transitions import instance_note

    host = failed(place_order, alice)
    clock.shift(timedelta(days=3))
    instance_note(instance=host, note="replaced by another host", actor="system:test")
    assert operations_panel(ada, list(projects.values())).context["failed"] == 0
