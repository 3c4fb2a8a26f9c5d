"""Placing MIG slices on shared hosts: 1,000 slice placements on 200 laid-out p4d hosts (11,200
slices of 1g.5gb), queries and time per placement, against the same on 20 hosts."""

from __future__ import annotations

import statistics
import time

HOSTS = 200
FEW = 20  # 1,120 slices: room for every placement
PLACEMENTS = 1000


def _place_all(user, project, profile, hosts: int) -> tuple[list[float], list[int]]:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    from instances.models import Instance, MigSlot, Order
    from instances.services.mig import mig_layout_set, mig_slice_place
    from tests.bench.bench_orders import host_records

    MigSlot.objects.all().delete()
    Instance.objects.update(shared_host=None)  # a slice keeps its host (PROTECT)
    Instance.objects.all().delete()
    Order.objects.all().delete()
    for host in host_records(user, project, hosts, kind="p4d.24xlarge"):
        mig_layout_set(host=host, profile=profile)
    holders = host_records(user, project, PLACEMENTS, kind="p4d.24xlarge")
    took, queries = [], []
    for holder in holders:
        reset_queries()  # Django keeps the last 9,000; the layouts alone fill that
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            slot = mig_slice_place(holder=holder, profile=profile)
            took.append(time.perf_counter() - started)
        assert slot is not None
        queries.append(len(captured.captured_queries))
    return took, queries


def run(report) -> None:
    from instances.models import MigProfile
    from tests.bench.bench_orders import setup_people

    user, project = setup_people()
    profile = MigProfile.objects.get(gpu_model="A100", gpu_memory_gib=40, name="1g.5gb")
    many_took, many_queries = _place_all(user, project, profile, HOSTS)
    few_took, few_queries = _place_all(user, project, profile, FEW)
    report(
        f"queries per placement, {HOSTS} hosts (min-max)",
        f"{min(many_queries)}-{max(many_queries)}",
        f"{PLACEMENTS} placements",
    )
    report(
        f"queries per placement, {FEW} hosts (min-max)", f"{min(few_queries)}-{max(few_queries)}"
    )
    many = statistics.median(many_took) * 1000
    few = statistics.median(few_took) * 1000
    report(f"ms per placement, {HOSTS} hosts (median)", f"{many:.2f}")
    report(f"ms per placement, {FEW} hosts (median)", f"{few:.2f}")
    report(f"{HOSTS} hosts / {FEW} hosts, time per placement", f"{many / few:.2f}x")
    first, last = many_took[:100], many_took[-100:]
    report(
        "last 100 / first 100 placements, 200 hosts",
        f"{statistics.median(last) / statistics.median(first):.2f}x",
        "the 1,000th placement against the first",
    )
