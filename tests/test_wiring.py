"""The wiring between apps (audit/registry.py), read from the running registry: every store,
what each app registered in it and in which order. ``pytest -s tests/test_wiring.py`` prints
it. A piece an app forgot to register (the budget check, a panel, a collector, what a host has
cost) fails here; registering a piece twice, or in a slot already filled, is refused."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from audit import registry
from audit.registry import (
    ADMISSION_CHECKS,
    INSTANCE_COST,
    Pieces,
    Slot,
    WiringError,
    check_wiring,
    wiring,
    wiring_problems,
)
from billing.services.budgets import budget_check
from billing.services.metering import costs_so_far

# What each store holds, in order: the piece's name and the callable's dotted path.
EXPECTED = {
    "order_admission_checks": [
        ("quota", "instances.services.quotas.quota_check"),
        ("budget", "billing.services.budgets.budget_check"),
    ],
    "order_headroom": [
        ("quota", "instances.services.quotas.quota_headroom"),
        ("budget", "billing.services.budgets.budget_headroom"),
    ],
    "dashboard_panels": [
        ("operations", "instances.panels.operations_panel"),
        ("summary", "instances.panels.summary_panel"),
        ("quota", "instances.panels.quota_panel"),
        ("hosts", "instances.panels.hosts_panel"),
        ("pools", "instances.panels.pools_panel"),
        ("budget", "billing.panels.budget_panel"),
        ("spend", "billing.panels.spend_panel"),
    ],
    "metrics_collectors": [
        ("celery_queues", "portal.lib.celery_ops.collect_queues"),
        ("celery_beat", "portal.lib.celery_ops.collect_beat"),
        ("audit", "audit.metrics.collect"),
        ("hosts", "instances.metrics.collect_hosts"),
        ("pools", "instances.metrics.collect_pools"),
        ("billing", "billing.metrics.collect"),
    ],
    "price_changed": [("price_history", "billing.services.prices.list_price_record")],
    "isolation_checks": [
        ("pools", "instances.services.pools.checks.pools_isolation_check"),
    ],
    "instance_cost": [("instance_cost", "billing.services.metering.costs_so_far")],
    "instance_rate": [("instance_rate", "billing.selectors.budgets.host_rate_per_hour")],
    "instance_cost_notes": [("instance_cost_notes", "billing.services.metering.cost_notes")],
}


def test_the_wiring_is_every_piece_each_app_registers_in_order():
    found = wiring()
    for store, pieces in found.items():
        kind = "slot" if isinstance(registry.registry[store], Slot) else "pieces"
        print(f"\n{store} ({kind})")
        for key, path in pieces or [("-", "NOTHING REGISTERED")]:
            print(f"  {key:20} {path}")
    assert found == EXPECTED


def test_nothing_declared_is_missing_and_the_system_check_agrees():
    assert wiring_problems() == []
    assert check_wiring() == []


def test_a_missing_budget_check_is_a_system_check_error():
    quota_only = dict(ADMISSION_CHECKS.items()[:1])
    with ADMISSION_CHECKS.replaced(quota_only):
        errors = check_wiring()
    assert [(error.id, error.msg) for error in errors] == [
        (
            "audit.E100",
            "order_admission_checks has nothing registered for 'budget': the app that answers "
            "it registers it in its AppConfig.ready().",
        )
    ]


def test_the_order_is_the_declared_one_whatever_order_the_apps_register_in():
    store = Pieces("checks", registry.AdmissionCheck, "test", order=("quota", "budget"))
    store.register("budget", budget_check)
    store.register("quota", print)
    assert [key for key, _ in store.items()] == ["quota", "budget"]
    assert list(store) == [print, budget_check]


def test_registering_a_piece_a_second_time_is_refused():
    with pytest.raises(WiringError, match="order_admission_checks already holds 'budget'"):
        ADMISSION_CHECKS.register("budget", budget_check)
    assert list(ADMISSION_CHECKS)[-1] is budget_check  # the first stays


def test_a_name_the_store_does_not_declare_is_refused():
    with pytest.raises(WiringError, match=r"has no place for 'cpu'.*declares, in order: quota"):
        ADMISSION_CHECKS.register("cpu", budget_check)


def test_a_callable_of_the_wrong_shape_is_refused():
    def needs_two(request, extra): ...

    store = Pieces("checks", registry.AdmissionCheck, "callable(order_request)", order=("x",))
    with pytest.raises(WiringError, match=r"needs_two cannot be registered in checks"):
        store.register("x", needs_two)
    with pytest.raises(WiringError, match="cannot be registered in instance_cost"):
        Slot("instance_cost", registry.InstanceCost, "test").register(budget_check)


def test_filling_a_slot_a_second_time_is_refused():
    with pytest.raises(
        WiringError,
        match=r"instance_cost is already answered by billing\.services\.metering\.costs_so_far",
    ):
        INSTANCE_COST.register(costs_so_far)
    assert INSTANCE_COST.get() is costs_so_far


def test_an_empty_slot_says_what_is_missing_when_asked():
    with INSTANCE_COST.replaced(None), pytest.raises(ImproperlyConfigured, match="instance_cost"):
        INSTANCE_COST.get()
    assert INSTANCE_COST.get() is costs_so_far  # put back


def test_no_store_is_added_after_import():
    with pytest.raises(TypeError):
        registry.registry["extra"] = ADMISSION_CHECKS  # type: ignore[index]
