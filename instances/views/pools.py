"""instances/views/pools.py: pages of pools. The list, the new pool form (with what will
happen), a pool's page with its chart, schedule, events and hosts, and the forms
(instances/forms/) that resize, schedule and delete it.

Every change goes through the pool services (instances/services/pools/: lifecycle.py,
schedules.py); a refusal lands beside the field it names, with a 400."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from instances import services
from instances.forms import (
    DesiredForm,
    PoolForm,
    PoolSizesForm,
    ScheduleForm,
    fallback_names,
)
from instances.models import Image, Instance, InstanceType, InterruptionPolicy, Market, Pool
from instances.selectors.pools import chart_series, instance_counts, pools_overview, with_last_event
from instances.services.pools.checks import pool_problems
from instances.services.pools.plan import mix
from portal import permissions
from portal.lib.pages import forbidden, form_errors, service_errors
from portal.models import Project

EVENTS_SHOWN = 40


def pools_page(request: HttpRequest) -> HttpResponse:
    """Pools the user sees: sizes, hosts by market, state, last event."""
    rows = pools_overview(request.user)
    return render(
        request,
        "instances/pools.html",
        {"rows": rows, "can_create": permissions.orderable_projects(request.user).exists()},
    )


# --- a new pool ----------------------------------------------------------------------------------


def _preview(user, data) -> dict:
    """What creating this pool would do: its price now and at max, and whether the project's
    approval policy holds it (the question order placement asks, for max_size hosts)."""

    def number(name: str, default: int) -> int:
        try:
            return max(0, int(data.get(name) or default))
        except (TypeError, ValueError):
            return default

    projects = permissions.orderable_projects(user)
    # Nothing picked yet: the first project, the one the form's select shows (as the order
    # page does).
    project = projects.filter(slug=data.get("project")).first() or projects.first()
    kind = InstanceType.objects.offered().filter(name=data.get("instance_type")).first()
    if project is None or kind is None:
        return {"ready": False}
    top = settings.PORTAL_POOL_MAX_SIZE
    high = min(max(number("max_size", 1), 1), top)
    want = min(number("desired", number("min_size", 0)), high)
    base = min(number("on_demand_base", 0), high)
    spot_percent = min(number("spot_percent", 0), 100)

    def per_hour(count: int):
        on_demand, spot = mix(count, base, spot_percent if kind.spot_offered else 0)
        price = services.order_estimate
        return (
            price(
                instance_type=kind, market=Market.ON_DEMAND, count=on_demand, lease_hours=1
            ).per_hour
            + price(instance_type=kind, market=Market.SPOT, count=spot, lease_hours=1).per_hour
        )

    image = Image.objects.filter(name=data.get("image")).first()
    if image is None:
        return {"ready": False}
    # The submit's own checks (pool_create's but the SSH key), so that the preview never
    # promises hosts the submit refuses.
    problems, approval = pool_problems(
        user=user,
        project=project,
        fields={
            "instance_type": kind,
            "image": image,
            "fallback_instance_types": fallback_names(data.get("fallback_instance_types")),
            "min_size": number("min_size", 0),
            "desired": number("desired", number("min_size", 0)),
            "max_size": number("max_size", 1),
            "on_demand_base": number("on_demand_base", 0),
            "spot_percent": number("spot_percent", 0),
            "interruption_policy": data.get("interruption_policy")
            or InterruptionPolicy.RELAUNCH_SPOT,
            "target_gpu_utilization": None,
            "ssh_public_key": "",
        },
    )
    on_demand_now, spot_now = mix(want, base, spot_percent if kind.spot_offered else 0)
    return {
        "ready": True,
        "project": project,
        "t": kind,
        "max_size": high,
        "desired": want,
        "on_demand_now": on_demand_now,
        "spot_now": spot_now,
        "per_hour_now": per_hour(want),
        "per_hour_max": per_hour(high),
        "gpus_max": high * kind.gpu_count,
        "approval": approval,
        "problems": problems,
    }


@service_errors()
def pool_new(request: HttpRequest) -> HttpResponse:
    """Create a pool: the form, what will happen, and the submit."""
    if not permissions.orderable_projects(request.user).exists():
        return forbidden(request, "You may create pools only in projects you order hosts in.")
    last = Pool.objects.filter(created_by=request.user).order_by("-created_at").first()
    initial = {
        "instance_type": request.GET.get("type") or (last.instance_type.name if last else None),
        "ssh_public_key": last.ssh_public_key if last else "",
        "project": last.project.slug if last else None,
        "min_size": 0,
        "desired": 1,
        "max_size": 4,
        "on_demand_base": 1,
        "spot_percent": 0,
    }
    form = PoolForm(request.POST or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        with form_errors(form):
            pool = services.pool_create(
                user=request.user,
                project=Project.objects.get(slug=form.cleaned_data["project"]),
                **form.service_fields(),
            )
            if pool.status == Pool.Status.AWAITING_APPROVAL:
                messages.info(
                    request,
                    f"Pool {pool.name} waits for approval: {pool.status_reason}. "
                    "It launches nothing until a manager approves it.",
                )
            else:
                messages.success(
                    request,
                    f"Pool {pool.name} created: {pool.desired} host(s) launch on the next "
                    "autoscaler pass.",
                )
            return redirect("pool", pk=pool.pk)
    # The form's initial values: the image it preselected (the newest that fits) included.
    shown = {k: v for k, v in form.initial.items() if v}
    source = request.POST if request.method == "POST" else shown
    context = {
        "form": form,
        "preview": _preview(request.user, source),
        # What target tracking waits for on a new pool (the model's defaults; the API sets them).
        "tracking": {
            name: Pool._meta.get_field(name).default
            for name in (
                "scale_out_minutes",
                "scale_in_minutes",
                "cooldown_minutes",
                "warmup_minutes",
            )
        },
    }
    return render(
        request, "instances/pool_new.html", context, status=400 if request.method == "POST" else 200
    )


def pool_preview_partial(request: HttpRequest) -> HttpResponse:
    """The "what will happen" panel of the new pool form, re-rendered by htmx as it changes."""
    return render(
        request, "instances/_pool_preview.html", {"preview": _preview(request.user, request.GET)}
    )


# --- a pool's page -------------------------------------------------------------------------------


def _visible_pool(request: HttpRequest, pk) -> Pool:
    return get_object_or_404(
        with_last_event(Pool.objects.for_user(request.user)).select_related(
            "project", "instance_type", "image", "created_by"
        ),
        pk=pk,
    )


def _pool_context(request: HttpRequest, pool: Pool, **forms) -> dict:
    now = timezone.now()
    can_change = permissions.can_change_pool(request.user, pool) and pool.status in (
        Pool.Status.ACTIVE,
        Pool.Status.AWAITING_APPROVAL,
    )
    schedules = []
    for schedule in pool.schedules.all():
        key = f"edit_{schedule.pk}"
        schedules.append(
            {
                "s": schedule,
                "words": services.schedule_words(schedule),
                "next_runs": services.schedule_next_runs(schedule),
                "form": forms.get(key)
                or ScheduleForm(
                    auto_id=f"id_s{schedule.pk}_%s",
                    initial={
                        name: getattr(schedule, name)
                        for name in ("cron", "timezone", "min_size", "max_size", "desired")
                    },
                ),
                "open": key in forms,
            }
        )
    hosts = list(
        Instance.objects.filter(pool=pool, status__in=Instance.LIVE)
        .select_related("instance_type")
        .order_by("market", "created_at")
    )
    sizes_initial = {
        name: getattr(pool, name)
        for name in (
            "min_size",
            "desired",
            "max_size",
            "on_demand_base",
            "spot_percent",
            "interruption_policy",
            "target_gpu_utilization",
        )
    }
    return {
        "p": pool,
        "n": instance_counts([pool.pk])[pool.pk],
        "policy_label": dict(InterruptionPolicy.choices).get(
            pool.interruption_policy, pool.interruption_policy
        ),
        "hosts": hosts,
        "schedules": schedules,
        "events": list(pool.events.all()[:EVENTS_SHOWN]),
        "can_change": can_change,
        "moving": any(h.status != Instance.Status.RUNNING for h in hosts),
        "now": now,
        "desired_form": forms.get("desired") or DesiredForm(initial={"desired": pool.desired}),
        "sizes_form": forms.get("sizes") or PoolSizesForm(initial=sizes_initial),
        "sizes_open": "sizes" in forms,
        "schedule_form": forms.get("schedule")
        or ScheduleForm(auto_id="id_new_%s", initial={"timezone": "UTC"}),
        "schedule_open": "schedule" in forms,
    }


def pool_page(request: HttpRequest, pk) -> HttpResponse:
    pool = _visible_pool(request, pk)
    return render(request, "instances/pool.html", _pool_context(request, pool))


def pool_panel_partial(request: HttpRequest, pk) -> HttpResponse:
    """The live part of the pool page (sizes, hosts, events), polled by htmx."""
    pool = _visible_pool(request, pk)
    return render(request, "instances/_pool_live.html", _pool_context(request, pool))


def pool_chart_data(request: HttpRequest, pk) -> JsonResponse:
    """The chart's series: desired, running on-demand and spot, and the quota, per pass."""
    pool = _visible_pool(request, pk)
    return JsonResponse(chart_series(pool, now=timezone.now()))


def _refused(request: HttpRequest, pool: Pool, name: str, form) -> HttpResponse:
    """The pool page again, the form that was refused open with its errors beside the fields."""
    context = _pool_context(request, pool, **{name: form})
    return render(request, "instances/pool.html", context, status=400)


def _changer(request: HttpRequest, pk) -> Pool | HttpResponse:
    pool = _visible_pool(request, pk)
    if not permissions.can_change_pool(request.user, pool):
        return forbidden(
            request, "Only the pool's creator, a manager of the project or an admin changes it."
        )
    return pool


@require_POST
@service_errors()
def pool_desired(request: HttpRequest, pk) -> HttpResponse:
    """Set desired by hand; the next autoscaler pass converges."""
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    form = DesiredForm(request.POST)
    if form.is_valid():
        with form_errors(form):
            row = services.pool_set_desired(
                pool=pool, user=request.user, desired=form.cleaned_data["desired"]
            )
            messages.success(request, f"Desired is now {row.desired}; the pool converges shortly.")
            return redirect("pool", pk=pool.pk)
    return _refused(request, pool, "desired", form)


@require_POST
@service_errors()
def pool_edit(request: HttpRequest, pk) -> HttpResponse:
    """Change min, desired, max, the on-demand base, the spot share, the policy, the target."""
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    form = PoolSizesForm(request.POST)
    if form.is_valid():
        with form_errors(form):
            services.pool_update(pool=pool, user=request.user, **form.cleaned_data)
            messages.success(request, f"Pool {pool.name} changed.")
            return redirect("pool", pk=pool.pk)
    return _refused(request, pool, "sizes", form)


@require_POST
@service_errors(back="pools")
def pool_remove(request: HttpRequest, pk) -> HttpResponse:
    """Delete the pool: its hosts are terminated, then it is gone."""
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    services.pool_delete(pool=pool, user=request.user)
    messages.success(request, f"Pool {pool.name} is being deleted: its hosts are terminating.")
    return redirect("pools")


@require_POST
@service_errors()
def schedule_add(request: HttpRequest, pk) -> HttpResponse:
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    form = ScheduleForm(request.POST, auto_id="id_new_%s")
    if form.is_valid():
        with form_errors(form):
            schedule = services.schedule_create(pool=pool, user=request.user, **form.cleaned_data)
            messages.success(request, f"Scheduled: {services.schedule_words(schedule)}.")
            return redirect(reverse("pool", args=[pool.pk]) + "#schedule")
    return _refused(request, pool, "schedule", form)


@require_POST
@service_errors()
def schedule_edit(request: HttpRequest, pk, sid: int) -> HttpResponse:
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    schedule = get_object_or_404(pool.schedules, pk=sid)
    form = ScheduleForm(request.POST, auto_id=f"id_s{sid}_%s")
    if form.is_valid():
        with form_errors(form):
            row = services.schedule_update(
                schedule=schedule, user=request.user, **form.cleaned_data
            )
            messages.success(request, f"Schedule changed: {services.schedule_words(row)}.")
            return redirect(reverse("pool", args=[pool.pk]) + "#schedule")
    return _refused(request, pool, f"edit_{sid}", form)


@require_POST
@service_errors(back=lambda request, pk, sid: reverse("pool", args=[pk]))
def schedule_remove(request: HttpRequest, pk, sid: int) -> HttpResponse:
    pool = _changer(request, pk)
    if isinstance(pool, HttpResponse):
        return pool
    schedule = get_object_or_404(pool.schedules, pk=sid)
    words = services.schedule_words(schedule)
    services.schedule_delete(schedule=schedule, user=request.user)
    messages.success(request, f"Removed the schedule: {words}.")
    return redirect(reverse("pool", args=[pool.pk]) + "#schedule")
