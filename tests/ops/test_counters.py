"""The counters move when the work happens: orders by outcome, cloud calls and errors by kind,
reconcile actions by kind, provisioning time once a host runs."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from instances.metrics import reconcile_counted
from instances.providers.base import ProviderPermanentError, ProviderTransientError
from instances.providers.counted import CountedProvider
from instances.services import quota_set
from instances.services.reconcile import ReconcileReport

pytestmark = pytest.mark.django_db


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_orders_are_counted_admitted_or_refused_by_quota(
    api_as, alice, ada, projects, order_body, catalog, django_capture_on_commit_callbacks
):
    admitted = sample("portal_orders_total", outcome="admitted")
    refused = sample("portal_orders_total", outcome="refused_quota")
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert api_as(alice).post("/api/v1/orders/", order_body(), format="json").status_code == 201
        over = api_as(alice).post("/api/v1/orders/", order_body(count=2), format="json")
    assert over.status_code == 409
    assert sample("portal_orders_total", outcome="admitted") == admitted + 1
    assert sample("portal_orders_total", outcome="refused_quota") == refused + 1


class FlakyCloud:
    """The edge: a cloud whose launch is throttled and whose stop is refused."""

    def launch(self, request):
        raise ProviderTransientError("slow down", code="RequestLimitExceeded")

    def stop(self, cloud_id):
        raise ProviderPermanentError("no", code="IncorrectInstanceState")

    def describe(self, cloud_ids):
        return {}

    region = "us-east-1"


def test_cloud_calls_and_their_errors_are_counted_by_call_and_kind():
    cloud = CountedProvider(FlakyCloud(), "flaky")
    calls = sample("portal_cloud_calls_total", provider="flaky", call="launch")
    with pytest.raises(ProviderTransientError):
        cloud.launch(None)
    with pytest.raises(ProviderPermanentError):
        cloud.stop("i-1")
    assert cloud.describe(["i-1"]) == {}
    assert cloud.region == "us-east-1"
    assert sample("portal_cloud_calls_total", provider="flaky", call="launch") == calls + 1
    kinds = {
        kind: sample("portal_cloud_errors_total", provider="flaky", call=call, kind=kind)
        for call, kind in (("launch", "transient"), ("stop", "permanent"), ("describe", "other"))
    }
    assert kinds["transient"] >= 1 and kinds["permanent"] >= 1 and kinds["other"] == 0


def test_reconcile_actions_are_counted_by_kind():
    before = sample("portal_reconcile_actions_total", kind="adopted")
    reconcile_counted(ReconcileReport(adopted=["a", "b"], enqueued=[]))
    assert sample("portal_reconcile_actions_total", kind="adopted") == before + 2


def test_a_host_reaching_running_observes_its_provisioning_time(
    place_order, alice, django_capture_on_commit_callbacks, clock
):
    from datetime import timedelta

    from instances.services.transitions import instance_transition

    labels = {"instance_type": "g5.xlarge", "market": "on_demand"}
    count = sample("portal_provisioning_seconds_count", **labels)
    total = sample("portal_provisioning_seconds_sum", **labels)
    order = place_order(alice)
    host = order.instances.get()
    with django_capture_on_commit_callbacks(execute=True):
        instance_transition(instance=host, to="provisioning", reason="t", actor="system:t")
        clock.shift(timedelta(seconds=42))
        instance_transition(instance=host, to="running", reason="t", actor="system:t")
    assert sample("portal_provisioning_seconds_count", **labels) == count + 1
    assert sample("portal_provisioning_seconds_sum", **labels) == pytest.approx(total + 42)
