"""instances/views/hosts.py: pages of hosts. My hosts (grouped by order, with a running total
and bulk actions), a host's page, and the actions asked from them (stop, start, terminate,
extend, keep running)."""

from __future__ import annotations

import shlex
import uuid
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from audit.lib.querystring import query_without
from instances import services
from instances.forms import ExtendForm
from instances.lib.checkpoints import backup_dir
from instances.models import ACTIONS, IdlePolicy, Instance, Order
from instances.providers import provider_class
from instances.selectors.clusters import (
    cluster_endpoints,
    cluster_environment,
    cluster_members,
    order_efa_interfaces,
)
from instances.selectors.costs import cost_notes, costs_so_far, rate_now, running_seconds
from instances.selectors.hosts import instances_named
from instances.selectors.mig import mig_layout
from instances.selectors.orders import held_orders
from instances.selectors.telemetry import gpu_first_reading_at, latest_gpu_readings
from instances.services.idle import idle_exemption, idle_since
from instances.services.leases import in_words, lease_fixed
from instances.services.spot_recovery import checkpoint_carries_over
from portal import permissions
from portal.lib.isolation import in_words as isolation_in_words
from portal.lib.pages import forbidden, service_errors
from portal.models import Project


def _scope(request: HttpRequest) -> str:
    """Mine or every host the viewer sees; someone who cannot own hosts (finance) always sees
    every host they may read, never an empty "Mine"."""
    if not permissions.can_order(request.user):
        return "projects"
    return "projects" if request.GET.get("scope") == "projects" else "mine"


def _hosts_queryset(request: HttpRequest):
    rows = (
        Instance.objects.for_user(request.user)
        .with_detail()
        .select_related("pool")
        .with_events()
        .distinct()
    )
    scope = _scope(request)
    if scope == "mine":
        # A shared MIG host is the portal's, whoever's slice launched it: its slices are
        # listed, and its own page is a link away from each of them.
        rows = rows.filter(owner=request.user, order__mig_host=False)
    if request.GET.get("ended") != "1":
        recent = timezone.now() - timedelta(minutes=30)
        rows = rows.filter(Q(status__in=Instance.LIVE) | Q(status_changed_at__gte=recent))
    return rows.order_by("-created_at", "-id")


# Hosts per page of My hosts / All hosts, newest first (an order cut by a page's end shows on
# both pages, each with its own hosts and their own per-order total).
PAGE_SIZE = 200


def _totals(rows) -> dict:
    """The running total over every host the filters keep, on every page: how many are live,
    how many run and what those cost an hour (each at rate_now, the rule of the rows' $/h), in
    two queries whatever the number of hosts."""
    every = Instance.objects.filter(pk__in=rows.values("pk"))
    counts = every.aggregate(
        live=Count("pk", filter=Q(status__in=Instance.LIVE)),
        running=Count("pk", filter=Q(status=Instance.Status.RUNNING)),
    )
    running = every.filter(status=Instance.Status.RUNNING).select_related("instance_type", "order")
    return {
        "live": counts["live"],
        "running": counts["running"],
        "rate": sum((rate_now(instance) for instance in running), Decimal(0)),
    }


def _new_order(request: HttpRequest) -> uuid.UUID | None:
    """The order just placed (?new=<id>): its hosts are highlighted, the others still shown."""
    try:
        return uuid.UUID(request.GET.get("new", ""))
    except ValueError:
        return None


def _host_rows(request: HttpRequest) -> dict:
    """The hosts, grouped by the order that launched them or the pool that keeps them (newest
    first), with what each
    has cost and, for the running ones, what they cost per hour now."""
    now = timezone.now()
    managed = permissions.managed_project_ids(request.user)
    queryset = _hosts_queryset(request)
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    costs = costs_so_far(rows, now=now)  # the whole page at once, as metering bills it
    notes = cost_notes(rows, now=now)
    readings = latest_gpu_readings([instance.pk for instance in rows], now=now)
    new = _new_order(request)
    groups: dict[uuid.UUID, dict] = {}
    for instance in rows:
        events = list(instance.events.all())
        running = instance.status == Instance.Status.RUNNING
        host = {
            "i": instance,
            "gpu": readings.get(instance.pk),
            "running_seconds": running_seconds(events, now),
            "cost": costs[instance.pk],
            "cost_note": notes[instance.pk],
            "rate": rate_now(instance) if running else None,
            "ssh": instance.ssh_command,
            "slice_session": instance.is_mig_slice and instance.status == Instance.Status.RUNNING,
            "can_act": permissions.can_act_on_host(request.user, instance, managed),
            "takeback": services.spot_takeback(instance),
        }
        # A pool's hosts hang on the order the pool keeps for them: they are listed under
        # the pool, which launched them and replaces them, not as an order someone placed.
        group = groups.setdefault(
            instance.pool_id or instance.order_id,
            {
                "order": instance.order,
                "pool": instance.pool,
                "hosts": [],
                "running": 0,
                "rate": Decimal(0),
            },
        )
        group["hosts"].append(host)
        group["new"] = instance.order_id == new
        if running:
            group["running"] += 1
            group["rate"] += host["rate"]
    for group in groups.values():
        if group["order"].is_cluster and not group["pool"]:
            # A cluster's nodes by rank (stable: within a rank, newest first, as listed).
            group["hosts"].sort(key=lambda host: host["i"].rank)
    hosts = [host for group in groups.values() for host in group["hosts"]]
    return {
        "groups": list(groups.values()),
        "hosts": hosts,
        **_totals(queryset),
        "page": page,
        "pager_query": query_without(request.GET, "page"),
        "selectable": any(host["can_act"] and host["i"].actions_now for host in hosts),
        "moving": any(
            h["i"].status in Instance.MOVING or h["i"].status == "requested" for h in hosts
        ),
        "query": request.GET.urlencode(),
        "now": now,
    }


def hosts_page(request: HttpRequest) -> HttpResponse:
    """My hosts: live status, running time, cost so far, connect, stop/start/terminate."""
    scope = _scope(request)
    context = {
        **_host_rows(request),
        "held": held_orders(request.user, mine=scope == "mine"),
        "scope": scope,
        "ended": request.GET.get("ended") == "1",
        "new_order": _new_order(request),
        "bulk_actions": [ACTIONS["stop"], ACTIONS["terminate"]],
    }
    return render(request, "instances/hosts.html", context)


def hosts_rows_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "instances/_host_rows.html", _host_rows(request))


def _visible_instance(request: HttpRequest, pk) -> Instance:
    return get_object_or_404(
        Instance.objects.for_user(request.user).with_detail().with_events().distinct(),
        pk=pk,
    )


def gpus_now(reading: dict) -> list[dict]:
    """Each GPU's values in the host's newest minute, for the page's table: utilization, and
    memory in GiB to a tenth with the share of the GPU's own total it is."""
    return [
        {
            "index": index,
            "utilization": utilization,
            "used_gib": round(used / 1024, 1),
            "total_gib": round(total / 1024, 1),
            "memory_percent": round(100 * used / total),
        }
        for index, utilization, used, total in reading["gpus"]
    ]


# The host page's chart asks the metrics API for its default window, a day.
GPU_CHART_HOURS = 24


def _host_context(request: HttpRequest, instance: Instance) -> dict:
    now = timezone.now()
    events = list(instance.events.all())
    policy = IdlePolicy.objects.filter(project_id=instance.project_id, enabled=True).first()
    fixed = lease_fixed(instance)
    gpu = latest_gpu_readings([instance.pk], now=now, with_gpus=True).get(instance.pk)
    window = now - timedelta(hours=GPU_CHART_HOURS)
    first = gpu_first_reading_at(instance, since=window)
    return {
        "i": instance,
        "events": list(reversed(events)),
        "running_seconds": running_seconds(events, now),
        "cost": costs_so_far([instance], now=now)[instance.pk],
        "cost_note": cost_notes([instance], now=now)[instance.pk],
        # The price it runs at now, as My hosts' row says it (rate_now: the latest spot price
        # for spot), not the price quoted when it was ordered.
        "rate": rate_now(instance) if instance.status == Instance.Status.RUNNING else None,
        "ssh": instance.ssh_command,
        "slice_session": instance.is_mig_slice and instance.status == Instance.Status.RUNNING,
        "job": getattr(instance.order, "job", None),
        # Running and reachable, with no login only for want of a key.
        "keyless": instance.keyless
        and not instance.is_mig_host
        and instance.status == Instance.Status.RUNNING
        and bool(instance.public_ip),
        "can_act": permissions.can_act_on_host(request.user, instance),
        "can_keep_running": permissions.can_keep_running(request.user, instance),
        "now": now,
        "moving": instance.status in Instance.MOVING
        or instance.status == "requested"
        or instance.notebooks.filter(status="starting").exists(),
        "extendable": instance.status in Instance.LEASED
        and instance.lease_expires_at
        and fixed is None,
        "lease_fixed": fixed.message if fixed and not instance.is_mig_host else None,
        "mig_empty_minutes": settings.PORTAL_MIG_HOST_EMPTY_MINUTES,
        "gpu": gpu,
        # GiB, as the memory is sold; to the nearest one (a reading's precision is a MiB).
        "gpu_memory_used_gib": round(gpu["memory_used_mib"] / 1024) if gpu else None,
        # Each GPU of a host with several, beside the chart's line per GPU.
        "gpus_now": gpus_now(gpu) if gpu and instance.instance_type.gpu_count > 1 else [],
        # The chart shows the day only once it holds a day: before, it says since when.
        "gpu_since": first if first and first > window + timedelta(hours=1) else None,
        "gpu_has_readings": first is not None,
        "gpu_chart_hours": GPU_CHART_HOURS,
        "idle_policy": policy,
        "idle_exempt": idle_exemption(instance),
        "idle_for": (
            in_words(now - idle_since(instance, policy))
            if policy and instance.idle_stop_at
            else None
        ),
        "replaced_by": instance.replaced_by,
        "takeback": services.spot_takeback(instance),
        "checkpoint_carries_over": checkpoint_carries_over(instance),
        "checkpoint_dir": backup_dir(instance.order.checkpoint_uri),
        "isolation": isolation_in_words(instance.isolation),
        **_notebook_context(instance),
        "cluster": _cluster_context(instance, now=now),
        "mig": _mig_context(instance, request.user),
    }


def _mig_context(instance: Instance, user) -> dict | None:
    """The MIG card: a slice's place (its shared host, GPU and device); a shared host's layout,
    slice by slice with who holds it for admins, and how full it is for everyone."""
    if instance.is_mig_slice:
        slot = instance.held_slot
        # Its own SSH login, where the cloud gives one (provider offers_slice_logins).
        logins = provider_class().offers_slice_logins()
        if slot is not None:  # its host and the host's order, in one query
            slot.host = Instance.objects.select_related("order").get(pk=slot.host_id)
        return {
            "slice": slot,
            "profile": instance.order.mig_profile,
            "logins": logins,
            # Its host's page, to those who may read it (not a researcher, in the portal's pool).
            "host_shown": slot is not None
            and Instance.objects.for_user(user).filter(pk=slot.host_id).exists(),
            "portal_pool": slot is not None and _in_portal_pool(slot.host),
        }
    if not instance.is_mig_host:
        return None
    slots = mig_layout(instance)
    return {
        "profile": instance.order.mig_profile,
        "taken": sum(1 for slot in slots if slot.holder_id),
        "total": len(slots),
        "slots": slots if user.is_portal_admin else [],
        "portal_pool": _in_portal_pool(instance),
    }


def _in_portal_pool(host: Instance) -> bool:
    return host.order.mig_pool == Project.MigPool.PORTAL


def _cluster_context(instance: Instance, *, now) -> dict | None:
    """The Cluster card of a cluster's node: every node by rank with where its worker
    listens, and (once all run) what a login shell on the node exports to train."""
    if instance.rank is None:
        return None
    members = cluster_members([instance.order_id]).get(instance.order_id, [])
    environment = cluster_environment(instance, members)
    costs = costs_so_far(
        list(Instance.objects.filter(order_id=instance.order_id).with_detail().with_events()),
        now=now,
    )
    return {
        "size": instance.order.count,
        "cost": sum(costs.values(), Decimal(0)),
        "nodes": list(zip(members, cluster_endpoints(members), strict=True)),
        "efa_interfaces": order_efa_interfaces(instance.order),
        "tf_config": environment.get("TF_CONFIG", ""),
        "exports": "\n".join(
            f"export {name}={shlex.quote(value)}" for name, value in environment.items()
        ),
    }


def _notebook_context(instance: Instance) -> dict:
    """The Connect card's notebook: the one running or starting, and whether to offer one. The
    card shows only on a running host, so nothing is asked about the others (the panel polls)."""
    if instance.status != Instance.Status.RUNNING:
        return {"notebook": None, "notebook_url": "", "notebooks_offered": False}
    notebook = services.live_notebook(instance)
    refused = services.notebook_refusal(instance) if notebook is None else None
    return {
        "notebook": notebook,
        "notebook_url": f"{services.notebook_base_url(instance)}lab" if notebook else "",
        "notebooks_offered": notebook is None and refused is None,
        "notebook_refused": refused[1] if refused else "",
    }


def host_page(request: HttpRequest, pk) -> HttpResponse:
    instance = _visible_instance(request, pk)
    return render(request, "instances/host.html", _host_context(request, instance))


def host_panel_partial(request: HttpRequest, pk) -> HttpResponse:
    instance = _visible_instance(request, pk)
    return render(request, "instances/_host_panel.html", _host_context(request, instance))


def _host_back(request: HttpRequest, *, pk, verb: str = "") -> str:
    """Where a host action's page goes next: the page it came from, if it is ours."""
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("host", args=[pk])
    return back


@require_POST
@service_errors(back=_host_back)
def host_keep_running(request: HttpRequest, pk) -> HttpResponse:
    """Keep running: hold off the idle stop (the answer to its warning)."""
    instance = _visible_instance(request, pk)
    row = services.instance_keep_running(instance=instance, user=request.user)
    if request.headers.get("HX-Target", "") == "host-panel":
        return host_panel_partial(request, pk)
    messages.success(
        request,
        f"{instance.instance_type} keeps running: no idle stop before "
        f"{row.idle_snoozed_until:%b %-d, %H:%M} UTC.",
    )
    return redirect(_host_back(request, pk=pk))


@require_POST
@service_errors(back=_host_back)
def host_action(request: HttpRequest, pk, verb: str) -> HttpResponse:
    """Stop, start or terminate from a page; htmx gets the refreshed fragment back."""
    instance = _visible_instance(request, pk)
    if verb not in ACTIONS:
        raise Http404
    services.instance_request_action(instance=instance, user=request.user, action=verb)
    target = request.headers.get("HX-Target", "")
    if target == "host-panel":
        return host_panel_partial(request, pk)
    if target == "host-rows":
        return hosts_rows_partial(request)
    if not target:
        messages.success(request, f"{verb.capitalize()} requested for {instance.instance_type}.")
    return redirect(_host_back(request, pk=pk))


@require_POST
@service_errors(back=_host_back)
def host_extend(request: HttpRequest, pk) -> HttpResponse:
    """Extend a host's lease by some hours (the lease limit and the budget may refuse)."""
    instance = _visible_instance(request, pk)
    form = ExtendForm(request.POST)
    if not form.is_valid():
        # Who may act is answered before what was sent (as the API does).
        if not permissions.can_act_on_host(request.user, instance):
            return forbidden(request, "You can see this host but not extend its lease.")
        raise ValidationError("Say by how many hours, a whole number of at least 1.")
    row = services.instance_extend_lease(
        instance=instance, user=request.user, hours=form.cleaned_data["hours"]
    )
    if request.headers.get("HX-Target", "") == "host-panel":
        return host_panel_partial(request, pk)
    messages.success(
        request,
        f"Lease extended by {form.cleaned_data['hours']} h: it now ends "
        f"{row.lease_expires_at:%b} {row.lease_expires_at.day}, "
        f"{row.lease_expires_at:%H:%M} UTC.",
    )
    return redirect(_host_back(request, pk=pk))


@require_POST
@service_errors(back="hosts")
def held_order_cancel(request: HttpRequest, pk) -> HttpResponse:
    """Cancel an order that waits for approval (its requester, a manager, an admin)."""
    order = get_object_or_404(Order.objects.for_user(request.user).distinct(), pk=pk)
    services.order_cancel(order=order, user=request.user, reason=request.POST.get("reason", ""))
    messages.success(
        request,
        f"Cancelled the order for {order.described} in {order.project.slug}; nothing was launched.",
    )
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("hosts")


@require_POST
@service_errors(back="hosts")
def hosts_bulk(request: HttpRequest) -> HttpResponse:
    """Stop or terminate the hosts ticked on My hosts, after one confirmation: one service
    call per host; the hosts whose state refuses are named in a message, the others go ahead."""
    action = ACTIONS.get(request.POST.get("action", ""))
    if action is None:
        raise Http404
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("hosts")
    try:
        ids = {uuid.UUID(value) for value in request.POST.getlist("host")}
    except ValueError:
        raise ValidationError(
            "Those are not hosts of this portal: tick hosts from the list."
        ) from None
    if not ids:
        raise ValidationError(f"Tick the hosts to {action.name} first.")
    hosts = instances_named(request.user, ids)
    if hosts is None:
        raise Http404  # a host this person may not see is not named, even as missing
    done, refused = services.instances_request_action(
        instances=hosts, user=request.user, action=action.name
    )
    if done:
        names = ", ".join(host.name for host in done)
        many = "1 host" if len(done) == 1 else f"{len(done)} hosts"
        messages.success(request, f"{action.label} requested for {many}: {names}.")
    for host, why in refused:
        messages.error(request, f"{host.name} ({host.instance_type.name}): {why.message}")
    return redirect(back)
