"""seed_demo's history: 60 days played through the services on a moved clock, once."""

from __future__ import annotations

import io
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import Max, Min

from billing.models import BudgetAlert, CurImport, DailyRollup, ListPrice, Usage
from demo.services.history import DAYS, KEY_PREFIX, history_start
from instances.models import Instance, InstanceEvent, Order, Pool, PoolEvent

pytestmark = [pytest.mark.django_db, pytest.mark.sweep]


def seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_seed_demo_plays_a_believable_past_once(clock, settings, tmp_path):
    """One test, since playing the history is the slow part: it is played once and looked at
    from every side, then seeded again."""
    settings.VAR_DIR = tmp_path
    began = time.monotonic()
    output = seed()
    took = time.monotonic() - began
    # Measured, not asserted tightly: the machine running the suite may be shared.
    print(f"\nseed_demo with {DAYS} days of history: {took:.1f} s")
    assert took < 600
    played = (output, clock.now)
    the_history_spans_sixty_days_of_projects_markets_and_gpus(played)
    the_history_has_interruptions_idle_stops_a_price_change_and_budget_alerts()
    the_sample_bill_is_reconciled_with_every_kind_of_result(tmp_path)
    a_second_seed_plays_nothing_and_says_unchanged()


def the_history_spans_sixty_days_of_projects_markets_and_gpus(played):
    output, now = played
    assert "History:" in output and "orders" in output
    orders = Order.objects.filter(idempotency_key__startswith=KEY_PREFIX)
    assert orders.count() > 100
    first = Usage.objects.aggregate(first=Min("start"), last=Max("end"))
    assert first["first"] < history_start(now) + timedelta(days=2)
    assert first["last"] > now - timedelta(days=1)
    used = set(Usage.objects.values_list("project__slug", "market", "gpu_model").distinct())
    assert {slug for slug, _, _ in used} == {"vision-lab", "nlp-lab"}
    assert {market for _, market, _ in used} == {"on_demand", "spot"}
    assert {"A100", "H100", "A10G", "L4"} <= {gpu for _, _, gpu in used}
    # Through the metering and rollups, not written by hand: every day has its rollups.
    days = set(DailyRollup.objects.values_list("day", flat=True))
    assert len(days) >= DAYS - 2


def the_history_has_interruptions_idle_stops_a_price_change_and_budget_alerts():
    interrupted = InstanceEvent.objects.filter(new_status=Instance.Status.INTERRUPTED)
    assert interrupted.count() >= 3
    assert Instance.objects.filter(replaces__isnull=False).exists()  # relaunched on spot
    assert InstanceEvent.objects.filter(reason__startswith="idle:").count() >= 2
    p4d = list(
        ListPrice.objects.filter(instance_type__name="p4d.24xlarge")
        .order_by("at")
        .values_list("price_per_hour", flat=True)
    )
    assert p4d[0] == Decimal("37.6885") and p4d[-1] < p4d[0]
    assert BudgetAlert.objects.filter(threshold=80).exists()
    # The pool followed its schedule over the last days: grown on a working day, shrunk at
    # night, a sample each pass for its chart.
    pool = Pool.objects.get(name="notebooks")
    kinds = set(pool.events.values_list("kind", flat=True))
    assert {PoolEvent.Kind.SCHEDULE, PoolEvent.Kind.LAUNCHED} <= kinds
    assert Instance.objects.filter(pool=pool).exists()
    assert pool.samples.count() >= 24 * 12
    # Some hosts run on when the demo opens, and an order waits for an admin.
    assert Instance.objects.filter(status=Instance.Status.RUNNING).count() >= 2
    assert Order.objects.filter(status=Order.Status.PENDING_APPROVAL).exists()


def the_sample_bill_is_reconciled_with_every_kind_of_result(var_dir):
    imported = CurImport.objects.get()
    assert (var_dir / "demo" / imported.source).read_bytes().startswith(b"identity/LineItemId")
    statuses = set(imported.results.values_list("status", flat=True))
    assert {"matched", "mismatched", "unknown", "not_in_bill"} <= statuses
    assert imported.results.filter(status="matched").count() > 5


def a_second_seed_plays_nothing_and_says_unchanged():
    orders = Order.objects.count()
    usage = Usage.objects.count()
    output = seed()
    assert "History: unchanged" in output
    assert "Demo: unchanged." in output
    assert (Order.objects.count(), Usage.objects.count()) == (orders, usage)
