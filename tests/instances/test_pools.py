"""Pools: creating through the approval policy, scaling by hand, the market mix, refused
scale-outs, budget stops, capacity fallbacks and deletion, driven through the services and the
autoscaler pass (the worker's tasks run here by hand)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils.html import escape

from billing.services.budgets import budget_set
from instances import services
from instances.models import ApprovalPolicy, Instance, InstanceType, Order, Pool, PoolEvent, Quota
from instances.services import quota_delete, quota_set
from instances.services.pools.plan import Host, mix, plan
from portal.lib.errors import Conflict, Forbidden
from portal.models import Notice
from tests.instances.pool_helpers import alive, provision_all, settle_terminations

S = Instance.Status
OD, SPOT = "on_demand", "spot"


# --- the plan, pure ----------------------------------------------------------------------------


def hosts(*specs) -> list[Host]:
    """('on_demand', 'running', 40) -> a Host; utilization optional."""
    made = []
    for number, spec in enumerate(specs):
        market, status, *util = spec
        made.append(Host(id=number, market=market, status=status, utilization=(util or [None])[0]))
    return made


def test_the_mix_keeps_the_base_on_demand_and_a_share_of_the_rest_on_spot():
    assert mix(10, 2, 75) == (2 + 2, 6)
    assert mix(1, 2, 100) == (1, 0)
    assert mix(8, 0, 100) == (0, 8)
    assert mix(5, 0, 50) == (3, 2)  # on-demand takes the odd host


def test_a_pool_below_desired_launches_each_market_its_share():
    step = plan(
        desired=6,
        base=2,
        spot_percent=100,
        hosts=hosts((OD, S.RUNNING)),
        spot_available=True,
        on_demand_fill=False,
    )
    assert (step.launch_on_demand, step.launch_spot, step.end) == (1, 4, [])


def test_scale_in_ends_spot_above_the_base_and_the_idlest_first_never_the_base():
    pool_hosts = hosts(
        (OD, S.RUNNING, 5), (OD, S.RUNNING, 1), (SPOT, S.RUNNING, 90), (SPOT, S.RUNNING, 3)
    )
    step = plan(
        desired=2,
        base=2,
        spot_percent=100,
        hosts=pool_hosts,
        spot_available=True,
        on_demand_fill=False,
    )
    assert sorted(h.id for h, _ in step.end) == [2, 3]
    step = plan(
        desired=3,
        base=2,
        spot_percent=100,
        hosts=pool_hosts,
        spot_available=True,
        on_demand_fill=False,
    )
    assert [h.id for h, _ in step.end] == [3]  # the idle spot host, not the busy one


def test_without_spot_capacity_the_pool_fills_with_on_demand_and_swaps_back_safely():
    step = plan(
        desired=3, base=0, spot_percent=100, hosts=[], spot_available=False, on_demand_fill=True
    )
    assert (step.launch_on_demand, step.launch_spot) == (3, 0)
    step = plan(
        desired=3, base=0, spot_percent=100, hosts=[], spot_available=False, on_demand_fill=False
    )
    assert (step.launch_on_demand, step.launch_spot, step.spot_short) == (0, 0, 3)
    # Spot is back: spot hosts launch first, and nothing ends while they are pending...
    three_od = hosts((OD, S.RUNNING), (OD, S.RUNNING), (OD, S.RUNNING))
    step = plan(
        desired=3,
        base=0,
        spot_percent=100,
        hosts=three_od,
        spot_available=True,
        on_demand_fill=True,
    )
    assert (step.launch_on_demand, step.launch_spot, step.end) == (0, 3, [])
    swapping = three_od + hosts((SPOT, S.PROVISIONING), (SPOT, S.RUNNING), (SPOT, S.RUNNING))
    for number, host in enumerate(swapping):
        host.id = number
    step = plan(
        desired=3,
        base=0,
        spot_percent=100,
        hosts=swapping,
        spot_available=True,
        on_demand_fill=True,
    )
    # ...and once two spot hosts run, two on-demand ones end: never fewer than 3 running.
    assert [h.market for h, _ in step.end] == [OD, OD]
    assert (step.launch_on_demand, step.launch_spot) == (0, 0)


def test_a_warned_spot_host_counts_as_leaving_and_is_replaced_at_once():
    pool_hosts = hosts((SPOT, S.RUNNING), (SPOT, S.RUNNING))
    pool_hosts[0].leaving = True
    step = plan(
        desired=2,
        base=0,
        spot_percent=100,
        hosts=pool_hosts,
        spot_available=True,
        on_demand_fill=False,
    )
    assert (step.launch_spot, step.end) == (1, [])


def test_a_leaving_host_ends_only_once_the_hosts_replacing_it_run():
    pool_hosts = hosts((OD, S.RUNNING), (OD, S.RUNNING), (OD, S.PROVISIONING))
    pool_hosts[0].leaving = True
    kwargs = {"desired": 2, "base": 0, "spot_percent": 0, "spot_available": True}
    step = plan(hosts=pool_hosts, on_demand_fill=True, **kwargs)
    assert (step.launch_on_demand, step.end) == (0, [])  # its replacement still starts
    pool_hosts[2].status = S.RUNNING
    step = plan(hosts=pool_hosts, on_demand_fill=True, **kwargs)
    assert step.end == [(pool_hosts[0], "handed over: the hosts replacing it run")]


def test_when_only_some_replacements_could_start_the_leaving_hosts_go_one_by_one():
    """A quota admitted one replacement for two hosts whose leases end: the oldest leaving host
    is handed over once it runs, which frees the room for the second replacement."""
    pool_hosts = hosts((OD, S.RUNNING), (OD, S.RUNNING), (OD, S.RUNNING))
    for number, host in enumerate(pool_hosts):
        host.launched_at = datetime(2026, 11, 2, number, tzinfo=UTC)
    pool_hosts[0].leaving = pool_hosts[1].leaving = True
    kwargs = {"desired": 2, "base": 0, "spot_percent": 0, "spot_available": True}
    step = plan(hosts=pool_hosts, on_demand_fill=True, **kwargs)
    assert step.end == [(pool_hosts[0], "handed over: the hosts replacing it run")]
    assert step.launch_on_demand == 1  # the second replacement, once the quota allows


# --- creating, approval, sizes -----------------------------------------------------------------


def test_a_pool_launches_desired_hosts_on_the_next_pass(make_pool, clock):
    pool = make_pool(desired=3)
    assert pool.status == Pool.Status.ACTIVE and pool.approved_max == 8
    report = services.autoscale()
    assert len(report.launched) == 3
    provision_all()
    assert len(alive(pool, status=S.RUNNING)) == 3
    host = alive(pool)[0]
    assert host.order_id == pool.launch_order_id and host.owner.username == "alice"
    assert services.autoscale().launched == []  # at desired: nothing more
    assert pool.samples.count() == 2


def test_sizes_out_of_order_answer_with_the_field_to_change(make_pool):
    with pytest.raises(ValidationError) as refused:
        make_pool(min_size=3, desired=2, max_size=8)
    assert refused.value.error_dict["desired"][0].code == "desired_out_of_range"
    with pytest.raises(ValidationError) as refused:
        make_pool(min_size=9, desired=9, max_size=8)
    assert refused.value.error_dict["min_size"][0].code == "min_above_max"
    with pytest.raises(ValidationError) as refused:
        make_pool(max_size=1000, desired=1)
    assert "max_size" in refused.value.error_dict


def test_fallback_types_must_have_the_same_gpus(make_pool, catalog):
    with pytest.raises(ValidationError) as refused:
        make_pool(fallback_instance_types=["g5.12xlarge"])
    assert "same GPUs" in refused.value.error_dict["fallback_instance_types"][0].message


def test_carol_cannot_create_a_pool_in_vision_lab(make_pool, carol):
    with pytest.raises(Forbidden):
        make_pool(user=carol)


def test_a_pool_the_approval_policy_holds_waits_then_launches_once_approved(
    make_pool, projects, ada, clock
):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=4)
    pool = make_pool(desired=2, max_size=6)
    assert pool.status == Pool.Status.AWAITING_APPROVAL
    assert "6 GPUs is more than the 4" in pool.status_reason
    assert services.autoscale().launched == []
    order = Order.objects.get(pool=pool)
    assert order.status == Order.Status.PENDING_APPROVAL and order.count == 6
    services.order_approve(order=order, user=ada)
    pool.refresh_from_db()
    assert pool.status == Pool.Status.ACTIVE and pool.approved_max == 6
    assert len(services.autoscale().launched) == 2


def test_raising_max_above_what_was_approved_asks_again(make_pool, projects, ada, alice):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=4)
    pool = make_pool(desired=2, max_size=4)
    assert pool.status == Pool.Status.ACTIVE
    pool = services.pool_update(pool=pool, user=alice, max_size=8, desired=6)
    assert (pool.max_size, pool.desired) == (4, 4)  # until approved
    raise_order = Order.objects.get(pool=pool, status=Order.Status.PENDING_APPROVAL)
    services.order_approve(order=raise_order, user=ada)
    pool.refresh_from_db()
    assert (pool.max_size, pool.approved_max) == (8, 8)


def test_a_second_raise_replaces_the_one_that_waits_and_lowering_max_withdraws_it(
    make_pool, projects, ada, alice
):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=4)
    pool = make_pool(desired=2, max_size=4)
    services.pool_update(pool=pool, user=alice, max_size=8)

    def waiting():
        return list(
            Order.objects.filter(pool=pool, status=Order.Status.PENDING_APPROVAL).values_list(
                "count", flat=True
            )
        )

    assert waiting() == [8]
    # Asked again: the same held order stands (approvers see one request, not two).
    services.pool_update(pool=pool, user=alice, max_size=8)
    assert waiting() == [8]
    # The sizes form sends the max the pool has (4): the raise keeps waiting.
    pool = services.pool_update(pool=pool, user=alice, min_size=0, desired=3, max_size=4)
    assert waiting() == [8] and pool.desired == 3
    # A different raise replaces it; the first leaves the approvers' queue as cancelled.
    pool = services.pool_update(pool=pool, user=alice, max_size=6)
    assert waiting() == [6] and pool.max_size == 4
    first = Order.objects.get(pool=pool, count=8)
    assert first.status == Order.Status.CANCELLED and first.decided_by == alice
    assert first.decision_reason == "superseded by max 6"
    changed = pool.events.filter(kind=PoolEvent.Kind.CHANGED).order_by("-at", "-pk").first()
    assert "raise to 8 waiting for approval is cancelled (superseded by max 6)" in changed.message
    assert "max 6 waits for approval" in changed.message
    assert not Notice.objects.filter(user=alice, subject__contains="withdrawn").exists()
    # Lowering max to what was approved withdraws the raise: approving it later is impossible.
    # An admin did it, so alice, who asked for it, hears of it.
    pool = services.pool_update(pool=pool, user=ada, max_size=3)
    assert waiting() == [] and (pool.max_size, pool.desired) == (3, 3)
    assert Order.objects.get(pool=pool, count=6).decision_reason == "withdrawn: max set to 3"
    notice = Notice.objects.get(user=alice, subject__contains="withdrawn")
    assert notice.subject == "Pool trainers: your request for 6 hosts was withdrawn"
    assert notice.body.startswith("ada withdrew it (withdrawn: max set to 3)")


def test_bob_cannot_resize_alices_pool_but_a_manager_or_admin_can(make_pool, bob, ada):
    pool = make_pool()
    with pytest.raises(Forbidden):
        services.pool_set_desired(pool=pool, user=bob, desired=3)
    pool = services.pool_set_desired(pool=pool, user=ada, desired=3)
    assert pool.desired == 3
    assert pool.events.filter(kind=PoolEvent.Kind.CHANGED).exists()


def test_a_pool_host_is_replaced_before_its_lease_ends_and_ends_once_the_new_one_runs(
    make_pool, alice, clock
):
    pool = make_pool(desired=2)
    services.autoscale()
    old = provision_all()
    end = min(host.lease_expires_at for host in old)
    clock.move_to(end - timedelta(minutes=20))
    # The owner hears that the pool, not an extension, takes care of it.
    assert {minutes for _, minutes in services.leases_warn()} == {60}
    notice = Notice.objects.filter(user=alice).order_by("-pk").first()
    assert notice.subject == "Pool trainers replaces a host in 20 minutes: g5.xlarge in vision-lab"
    assert "launches its replacement up to 30 minutes before" in notice.body
    report = services.autoscale()
    assert len(report.launched) == 2 and report.ended == []
    assert len(alive(pool, status=S.RUNNING)) == 2  # the old ones serve meanwhile
    provision_all()
    report = services.autoscale()
    assert sorted(report.ended) == sorted(str(host.pk) for host in old)
    running = alive(pool, status=S.RUNNING)
    assert len(running) == 2 and not {host.pk for host in running} & {host.pk for host in old}
    ended = Instance.objects.get(pk=old[0].pk).events.get(new_status=S.TERMINATING)
    assert ended.reason == "pool trainers: handed over: the hosts replacing it run"
    assert services.autoscale().launched == []


def test_a_pool_at_its_quota_hands_its_hosts_over_one_by_one_without_dipping(
    make_pool, projects, ada, clock
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=3)
    pool = make_pool(desired=2)
    services.autoscale()
    old = provision_all()
    clock.move_to(min(host.lease_expires_at for host in old) - timedelta(minutes=25))
    lowest = 2

    def step(minutes: int = 0):
        nonlocal lowest
        clock.shift(timedelta(minutes=minutes))
        report = services.autoscale()
        settle_terminations()
        provision_all()
        lowest = min(lowest, len(alive(pool, status=S.RUNNING)))
        return report

    assert len(step().launched) == 1  # the quota has room for one replacement
    assert len(step().ended) == 1  # it runs: the oldest host is handed over, room frees
    step(2)  # past the backoff of the refused second replacement
    assert len(step().ended) == 1
    running = alive(pool, status=S.RUNNING)
    assert len(running) == 2 and not {h.pk for h in running} & {h.pk for h in old}
    assert lowest == 2, "the pool dipped below desired during the handover"


def test_a_lease_shorter_than_the_handover_window_is_handed_over_at_half_time(
    make_pool, projects, ada, clock, settings
):
    settings.PORTAL_POOL_LEASE_HANDOVER_SECONDS = 4 * 3600
    quota_set(project=projects["vision-lab"], actor=ada, max_lease_hours=1)
    pool = make_pool(desired=1)
    services.autoscale()
    provision_all()
    for _ in range(3):  # a fresh host is not leaving: no replacement after replacement
        assert services.autoscale().launched == []
        provision_all()
    clock.shift(timedelta(minutes=31))
    assert len(services.autoscale().launched) == 1
    provision_all()
    assert len(services.autoscale().ended) == 1
    for _ in range(3):
        assert services.autoscale().launched == []
        provision_all()
    assert len(alive(pool)) == 1


# --- limits: quota, budget -------------------------------------------------------------------


def test_quota_holds_the_pool_at_4_of_6_then_raising_it_lets_the_pool_reach_6(
    make_pool, projects, ada, alice, clock, django_capture_on_commit_callbacks
):
    vision = projects["vision-lab"]
    quota_set(project=vision, actor=ada, max_gpus=4)
    pool = make_pool(desired=6)
    report = services.autoscale()
    assert len(report.launched) == 4
    refused = pool.events.get(kind=PoolEvent.Kind.REFUSED)
    assert refused.message.startswith("quota holds pool at 4 of 6: ")
    assert "vision-lab may run 4 GPUs" in refused.message
    assert Notice.objects.filter(user=alice, subject__contains="cannot grow").count() == 1
    provision_all()
    # Retries within the backoff say nothing new and send no second notice.
    for _ in range(3):
        clock.shift(timedelta(minutes=5))
        services.autoscale()
    assert pool.events.filter(kind=PoolEvent.Kind.REFUSED).count() == 1
    assert Notice.objects.filter(user=alice, subject__contains="cannot grow").count() == 1
    pool.refresh_from_db()
    assert pool.blocked_until > clock.now + timedelta(minutes=1)  # backing off
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(project=vision, actor=ada, max_gpus=8)
    # The limit moved: the next pass tries at once, not at the end of the backoff.
    pool.refresh_from_db()
    assert pool.blocked_until is None
    clock.shift(timedelta(seconds=30))
    assert len(services.autoscale().launched) == 2
    provision_all()
    assert len(alive(pool, status=S.RUNNING)) == 6
    assert Notice.objects.filter(user=alice, subject__contains="cannot grow").count() == 1


def _held_by_quota(make_pool, projects, ada) -> Pool:
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    pool = make_pool(desired=2)
    services.autoscale()
    pool.refresh_from_db()
    assert pool.blocked_until is not None
    return pool


def test_removing_the_quota_ends_the_backoff_and_the_pool_grows(
    make_pool, projects, ada, clock, django_capture_on_commit_callbacks
):
    pool = _held_by_quota(make_pool, projects, ada)
    with django_capture_on_commit_callbacks(execute=True):
        quota_delete(quota=Quota.objects.get(project=projects["vision-lab"]), actor=ada)
    pool.refresh_from_db()
    assert pool.blocked_until is None
    assert len(services.autoscale().launched) == 1


def test_a_quota_saved_unchanged_leaves_the_backoff_alone(make_pool, projects, ada, clock):
    pool = _held_by_quota(make_pool, projects, ada)
    held_until = pool.blocked_until
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    pool.refresh_from_db()
    assert pool.blocked_until == held_until


def test_a_raised_budget_ends_the_backoff_of_a_pool_it_held(
    make_pool, projects, ada, fin, clock, django_capture_on_commit_callbacks
):
    vision = projects["vision-lab"]
    budget_set(project=vision, actor=ada, monthly_amount="1.00", policy="block_all")
    pool = make_pool(desired=2)
    report = services.autoscale()
    assert report.launched == []
    pool.refresh_from_db()
    assert pool.blocked_until is not None
    assert pool.events.get(kind=PoolEvent.Kind.REFUSED).message.startswith("budget holds pool")
    with django_capture_on_commit_callbacks(execute=True):
        budget_set(project=vision, actor=fin, monthly_amount="100000.00")
    pool.refresh_from_db()
    assert pool.blocked_until is None
    assert len(services.autoscale().launched) == 2


def test_a_budget_that_refuses_on_demand_still_lets_the_pools_spot_hosts_launch(
    make_pool, projects, ada, clock
):
    budget_set(
        project=projects["vision-lab"], actor=ada, monthly_amount="1.00", policy="block_on_demand"
    )
    pool = make_pool(desired=4, on_demand_base=1, spot_percent=100)
    report = services.autoscale()
    # The one on-demand host is refused; the three spot hosts are not the budget's to refuse.
    assert sorted(i.market for i in Instance.objects.filter(pk__in=report.launched)) == ["spot"] * 3
    refused = pool.events.get(kind=PoolEvent.Kind.REFUSED).message
    assert refused.startswith("budget holds pool at 3 of 4: Budget exceeded")
    assert "this order (1 host for" in refused


def test_while_on_demand_waits_out_a_budget_refusal_lost_spot_hosts_are_replaced(
    make_pool, projects, ada, clock, settings, client
):
    """Only the refused market backs off: the pool's spot replacements do not wait for the
    on-demand host the budget blocks (before, nothing launched until the backoff ended)."""
    from instances.providers.simulated import SimulatedProvider

    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    budget_set(
        project=projects["vision-lab"], actor=ada, monthly_amount="1.00", policy="block_on_demand"
    )
    pool = make_pool(desired=3, on_demand_base=1, spot_percent=100)
    assert len(services.autoscale().launched) == 2  # the on-demand host is refused
    pool.refresh_from_db()
    assert pool.blocked_markets == ["on_demand"]
    held_until = pool.blocked_until
    assert held_until > clock.now
    first, _ = provision_all()
    clock.shift((held_until - clock.now) / 2)
    SimulatedProvider().warn(first.cloud_id)
    services.spot_events_drain()
    report = services.autoscale()  # within the on-demand backoff
    assert [Instance.objects.get(pk=pk).market for pk in report.launched] == [SPOT]
    pool.refresh_from_db()
    # The on-demand wait is untouched: same streak, no second refusal event or notice.
    assert pool.blocked_markets == ["on_demand"] and pool.refusal_streak == 1
    assert pool.blocked_until == held_until
    assert pool.events.filter(kind=PoolEvent.Kind.REFUSED).count() == 1
    assert Notice.objects.filter(subject__contains="cannot grow").count() == 1
    client.force_login(ada)
    page = client.get(f"/pools/{pool.pk}/").content.decode()
    assert "On-demand launches are tried again after" in page
    held = escape(pool.refusal_reason)
    assert held.endswith(".") and f"{held} On-demand launches" in page  # one full stop


def test_a_mixed_launch_is_priced_market_by_market(make_pool, projects, ada, catalog, clock):
    """The budget compares each part at its own price: one on-demand host and three spot
    hosts fit where four hosts at the on-demand price would not."""
    services.instance_type_record_spot_price(
        instance_type_id=catalog["g5.xlarge"].pk, price_per_hour=Decimal("0.30"), at=clock.now
    )
    g5 = InstanceType.objects.get(name="g5.xlarge")
    vision = projects["vision-lab"]
    pool = make_pool(desired=0, on_demand_base=1, spot_percent=100)
    lease = pool.launch_order.lease_hours

    def cost(market, count):
        return services.order_estimate(
            instance_type=g5, market=market, count=count, lease_hours=lease
        ).per_lease

    mixed = cost("on_demand", 1) + cost("spot", 3)
    assert mixed < cost("on_demand", 4)
    budget_set(project=vision, actor=ada, monthly_amount=f"{mixed + 1:.2f}", policy="block_all")
    pool = services.pool_set_desired(pool=pool, user=ada, desired=4)
    report = services.autoscale()
    assert len(report.launched) == 4 and report.refused == []
    # The next spot host would not fit: the on-demand rows written first are counted.
    pool = services.pool_set_desired(pool=pool, user=ada, desired=6)
    report = services.autoscale()
    assert report.launched == []
    assert "holds pool at 4 of 6" in pool.events.get(kind=PoolEvent.Kind.REFUSED).message


def test_removing_the_budget_ends_the_backoff_too(
    make_pool, projects, ada, clock, django_capture_on_commit_callbacks
):
    vision = projects["vision-lab"]
    budget_set(project=vision, actor=ada, monthly_amount="1.00", policy="block_all")
    pool = make_pool(desired=2)
    assert services.autoscale().launched == []
    with django_capture_on_commit_callbacks(execute=True):
        budget_set(project=vision, actor=ada, monthly_amount=None)
    pool.refresh_from_db()
    assert pool.blocked_until is None
    assert len(services.autoscale().launched) == 2


def test_a_lowered_quota_stops_growth_but_ends_nothing(make_pool, projects, ada, alice, clock):
    pool = make_pool(desired=4)
    services.autoscale()
    provision_all()
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=2)
    services.pool_set_desired(pool=pool, user=alice, desired=6)
    report = services.autoscale()
    assert report.launched == [] and report.ended == []
    assert len(alive(pool, status=S.RUNNING)) == 4
    assert "holds pool at 4 of 6" in pool.events.filter(kind="refused").get().message


def test_a_budget_stop_sets_the_pool_to_zero_with_the_reason(make_pool, projects, clock):
    pool = make_pool(min_size=1, desired=3)
    services.autoscale()
    provision_all()
    services.pools_budget_stop(project=projects["vision-lab"], reason="the budget is spent")
    pool.refresh_from_db()
    assert (pool.min_size, pool.desired) == (0, 0)
    assert pool.events.get(kind=PoolEvent.Kind.BUDGET).message == "set to 0: the budget is spent"
    assert len(services.autoscale().ended) == 3
    settle_terminations()
    assert alive(pool) == []


# --- capacity, interruptions, deletion -------------------------------------------------------


def test_no_spot_capacity_fills_with_on_demand_then_moves_back_to_spot(make_pool, clock, settings):
    settings.PORTAL_POOL_CAPACITY_HOLD_SECONDS = 300
    pool = make_pool(desired=2, spot_percent=100, interruption_policy="fallback_on_demand")
    services.autoscale()
    for host in alive(pool):
        assert host.market == SPOT
        assert services.pool_capacity_refused(instance=host) is True
    pool.refresh_from_db()
    assert "spot:g5.xlarge" in pool.capacity_holds
    services.autoscale()
    provision_all()
    assert sorted(h.market for h in alive(pool, status=S.RUNNING)) == [OD, OD]
    clock.shift(timedelta(minutes=6))  # the hold has passed: spot first, on-demand still up
    services.autoscale()
    assert len(alive(pool, market=SPOT)) == 2 and len(alive(pool, market=OD)) == 2
    provision_all()
    services.autoscale()  # spot runs: the on-demand hosts end
    settle_terminations()
    assert sorted(h.market for h in alive(pool)) == [SPOT, SPOT]


def test_a_fallback_type_is_tried_when_the_first_has_no_capacity(make_pool, catalog, clock):
    first = catalog["g5.xlarge"]
    twin = InstanceType.objects.create(
        provider=first.provider,
        name="g5.2xlarge",
        gpu_model=first.gpu_model,
        gpu_count=first.gpu_count,
        gpu_memory_gib=first.gpu_memory_gib,
        gpu_architecture=first.gpu_architecture,
        vcpus=8,
        memory_gib=32,
        network_gbps=first.network_gbps,
        regions=first.regions,
        on_demand_price_per_hour=first.on_demand_price_per_hour,
    )
    pool = make_pool(desired=1, fallback_instance_types=[twin.name])
    services.autoscale()
    services.pool_capacity_refused(instance=alive(pool)[0])
    services.autoscale()
    assert [h.instance_type.name for h in alive(pool)] == ["g5.2xlarge"]


def test_deleting_a_pool_ends_its_hosts_then_the_pool(make_pool, alice, clock):
    pool = make_pool(desired=2)
    services.autoscale()
    provision_all()
    services.pool_delete(pool=pool, user=alice)
    settle_terminations()
    services.autoscale()
    pool.refresh_from_db()
    assert pool.status == Pool.Status.DELETED
    assert alive(pool) == []
    # The name is free again.
    assert make_pool(desired=0).name == "trainers"


def test_a_pool_waiting_for_approval_may_change_desired_but_not_raise_its_max(
    make_pool, projects, alice
):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=4)
    pool = make_pool(desired=2, max_size=6)
    assert services.pool_set_desired(pool=pool, user=alice, desired=3).desired == 3
    with pytest.raises(Conflict) as refused:
        services.pool_update(pool=pool, user=alice, max_size=7)
    assert refused.value.code == "awaiting_approval"


def test_a_warned_spot_host_of_a_pool_is_replaced_by_the_next_pass(make_pool, clock, settings):
    from instances.providers.simulated import SimulatedProvider

    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    pool = make_pool(desired=1, spot_percent=100, interruption_policy="relaunch_spot")
    services.autoscale()
    (host,) = provision_all()
    SimulatedProvider().warn(host.cloud_id)
    services.spot_events_drain()
    host.refresh_from_db()
    assert host.spot_warning_at is not None
    assert "Its pool launches a replacement" in host.events.last().reason
    assert len(services.autoscale().launched) == 1  # the warned host counts as leaving
    assert services.autoscale().launched == []  # once
    assert len(alive(pool, market=SPOT)) == 2
