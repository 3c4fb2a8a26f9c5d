"""Pages of the instances app: the catalog, the order page, My hosts, a host's page, and the
approval inbox of managers and admins."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from instances import services
from instances.api.filters import CatalogFilter
from instances.checkpoints import backup_dir
from instances.models import (
    ACTIONS,
    Image,
    Instance,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
)
from instances.selectors import held_orders, latest_gpu_readings, orders_to_decide
from instances.services.idle import warn_after_minutes
from instances.usage import costs_so_far, running_seconds
from portal import permissions
from portal.models import IdlePolicy, Project
from portal.pages import forbidden, form_errors, service_errors

SORTS = [
    ("price", "Price per hour, low to high"),
    ("-price", "Price per hour, high to low"),
    ("price_per_gpu_hour", "Price per GPU-hour"),
    ("-gpu_memory", "Most GPU memory"),
    ("-gpu_count", "Most GPUs"),
    ("name", "Name"),
]


def catalog(request: HttpRequest) -> HttpResponse:
    """The GPU catalog: cards with specs, prices and the images that run on each type."""
    data = request.GET.copy()
    data.setdefault("ordering", "price")
    filterset = CatalogFilter(data=data)
    images = list(Image.objects.filter(is_active=True))
    valid = filterset.is_valid()
    cards = []
    if valid:
        for instance_type in filterset.qs:
            cards.append({"type": instance_type, "images": instance_type.compatible_images(images)})
    offered = InstanceType.objects.offered()
    gpu_models = sorted(set(offered.values_list("gpu_model", flat=True)))
    gpu_counts = sorted(set(offered.values_list("gpu_count", flat=True)))
    context = {
        "filterset": filterset,
        "form": filterset.form,
        "errors": filterset.errors if not valid else {},
        "cards": cards,
        "gpu_models": gpu_models,
        "gpu_counts": gpu_counts,
        # The filter's own copy holds canonical names (h100 -> H100).
        "selected_models": filterset.data.getlist("gpu_model"),
        "sorts": SORTS,
        "total": offered.count(),
        "can_order": permissions.can_order(request.user),
    }
    return render(request, "instances/catalog.html", context, status=200 if valid else 400)


# --- ordering ------------------------------------------------------------------------------------


class OrderForm(forms.Form):
    """The order page's form; the service does the real validation and names the fields."""

    project = forms.ChoiceField()
    image = forms.ChoiceField()
    market = forms.ChoiceField(choices=Market.choices, widget=forms.RadioSelect)
    count = forms.IntegerField(min_value=1, initial=1)
    lease_hours = forms.IntegerField(min_value=1)
    ssh_public_key = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    max_spot_price = forms.DecimalField(required=False, max_digits=14, decimal_places=6)
    interruption_policy = forms.ChoiceField(
        choices=InterruptionPolicy.choices, required=False, initial=InterruptionPolicy.NOTIFY
    )
    # One key per rendered form: a double click or a resubmitted page places one order.
    submission = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, user, instance_type: InstanceType, **kwargs):
        super().__init__(*args, **kwargs)
        projects = permissions.orderable_projects(user)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        self.fields["image"].choices = [
            (
                image.name,
                f"TensorFlow {image.tensorflow_version} · CUDA {image.cuda_version} · "
                f"cuDNN {image.cudnn_version} · Python {image.python_version}",
            )
            for image in instance_type.compatible_images()
        ]
        self.fields["lease_hours"].max_value = settings.PORTAL_LEASE_MAX_HOURS
        self.fields["count"].max_value = settings.PORTAL_ORDER_MAX_COUNT
        if not instance_type.spot_offered:
            self.fields["market"].choices = [(Market.ON_DEMAND, Market.ON_DEMAND.label)]


def _estimate_context(instance_type: InstanceType, data) -> dict:
    def number(name: str, default: int) -> int:
        try:
            return max(1, int(data.get(name) or default))
        except (TypeError, ValueError):
            return default

    market = data.get("market") if data.get("market") in Market.values else Market.ON_DEMAND
    count = min(number("count", 1), settings.PORTAL_ORDER_MAX_COUNT)
    lease = min(
        number("lease_hours", settings.PORTAL_LEASE_DEFAULT_HOURS), settings.PORTAL_LEASE_MAX_HOURS
    )
    estimate = services.order_estimate(
        instance_type=instance_type, market=market, count=count, lease_hours=lease
    )
    on_demand = services.order_estimate(
        instance_type=instance_type, market=Market.ON_DEMAND, count=count, lease_hours=lease
    )
    return {
        "estimate": estimate,
        "count": count,
        "lease_hours": lease,
        "market": market,
        "gpu_hours": count * lease * instance_type.gpu_count,
        "saving": on_demand.per_lease - estimate.per_lease,
        "t": instance_type,
    }


@service_errors()
def order_page(request: HttpRequest, name: str) -> HttpResponse:
    """Order hosts of one catalog type: the form, the live estimate, and the submit."""
    instance_type = get_object_or_404(InstanceType.objects.offered(), name=name)
    if not permissions.can_order(request.user):
        return forbidden(request, "Finance can read hosts and costs but cannot order hosts.")
    last = Order.objects.filter(requester=request.user).order_by("-created_at").first()
    initial = {
        "market": Market.SPOT
        if request.GET.get("market") == "spot" and instance_type.spot_offered
        else Market.ON_DEMAND,
        "lease_hours": settings.PORTAL_LEASE_DEFAULT_HOURS,
        "ssh_public_key": last.ssh_public_key if last else "",
        "project": last.project.slug if last else None,
    }
    form = OrderForm(
        request.POST or None, user=request.user, instance_type=instance_type, initial=initial
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        with form_errors(form):
            order, _ = services.order_submit(
                idempotency_key=f"page-{data['submission']}",
                requester=request.user,
                project=Project.objects.get(slug=data["project"]),
                instance_type=instance_type,
                image=Image.objects.get(name=data["image"]),
                market=data["market"],
                count=data["count"],
                lease_hours=data["lease_hours"],
                ssh_public_key=data["ssh_public_key"],
                max_spot_price=data["max_spot_price"] if data["market"] == Market.SPOT else None,
                interruption_policy=data["interruption_policy"]
                if data["market"] == Market.SPOT
                else "",
            )
            what = f"{order.count}× {instance_type.name} ({order.get_market_display()})"
            if order.status == Order.Status.PENDING_APPROVAL:
                messages.info(
                    request,
                    f"Your order for {what} waits for approval: {order.approval_reason}. "
                    "You will get a notice when it is decided.",
                )
                return redirect("dashboard")
            messages.success(
                request, f"Ordered {what} for {order.project.slug}. Provisioning has started."
            )
            return redirect(f"{reverse('hosts')}?order={order.pk}")
    if request.method == "POST":
        status = 400
    source = (
        request.POST
        if request.method == "POST"
        else {key: value for key, value in initial.items() if value is not None}
    )
    context = {
        "t": instance_type,
        "form": form,
        "images": instance_type.compatible_images(),
        **_estimate_context(instance_type, source),
    }
    return render(request, "instances/order.html", context, status=status)


def order_estimate_partial(request: HttpRequest, name: str) -> HttpResponse:
    """The estimate panel, re-rendered by htmx as the form changes."""
    instance_type = get_object_or_404(InstanceType.objects.offered(), name=name)
    return render(
        request, "instances/_estimate.html", _estimate_context(instance_type, request.GET)
    )


# --- hosts ---------------------------------------------------------------------------------------


def _scope(request: HttpRequest) -> str:
    """Mine or every host the viewer sees; someone who cannot own hosts (finance) always sees
    every host they may read, never an empty "Mine"."""
    if not permissions.can_order(request.user):
        return "projects"
    return "projects" if request.GET.get("scope") == "projects" else "mine"


def _hosts_queryset(request: HttpRequest):
    rows = Instance.objects.for_user(request.user).with_detail().with_events().distinct()
    scope = _scope(request)
    if scope == "mine":
        rows = rows.filter(owner=request.user)
    if request.GET.get("order"):
        try:
            rows = rows.filter(order_id=uuid.UUID(request.GET["order"]))
        except ValueError:
            rows = rows.none()
    if request.GET.get("ended") != "1":
        recent = timezone.now() - timedelta(minutes=30)
        rows = rows.filter(Q(status__in=Instance.LIVE) | Q(status_changed_at__gte=recent))
    return rows.order_by("-created_at")


def _host_rows(request: HttpRequest) -> dict:
    now = timezone.now()
    hosts = []
    managed = permissions.managed_project_ids(request.user)
    rows = list(_hosts_queryset(request)[:200])
    costs = costs_so_far(rows, now=now)  # the whole page at once, as metering bills it
    readings = latest_gpu_readings([instance.pk for instance in rows], now=now)
    for instance in rows:
        events = list(instance.events.all())
        hosts.append(
            {
                "i": instance,
                "gpu": readings.get(instance.pk),
                "running_seconds": running_seconds(events, now),
                "cost": costs[instance.pk],
                "ssh": instance.ssh_command,
                "can_act": permissions.can_act_on_host(request.user, instance, managed),
            }
        )
    return {
        "hosts": hosts,
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
        "order_id": request.GET.get("order", ""),
    }
    return render(request, "instances/hosts.html", context)


def hosts_rows_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "instances/_host_rows.html", _host_rows(request))


def _visible_instance(request: HttpRequest, pk) -> Instance:
    return get_object_or_404(
        Instance.objects.for_user(request.user).with_detail().with_events().distinct(),
        pk=pk,
    )


def _host_context(request: HttpRequest, instance: Instance) -> dict:
    now = timezone.now()
    events = list(instance.events.all())
    policy = IdlePolicy.objects.filter(project_id=instance.project_id, enabled=True).first()
    return {
        "i": instance,
        "events": list(reversed(events)),
        "running_seconds": running_seconds(events, now),
        "cost": costs_so_far([instance], now=now)[instance.pk],
        "ssh": instance.ssh_command,
        "can_act": permissions.can_act_on_host(request.user, instance),
        "can_keep_running": permissions.can_keep_running(request.user, instance),
        "now": now,
        "moving": instance.status in Instance.MOVING or instance.status == "requested",
        "extendable": instance.status in Instance.LEASED and instance.lease_expires_at,
        "gpu": latest_gpu_readings([instance.pk], now=now).get(instance.pk),
        "idle_policy": policy,
        "idle_for": warn_after_minutes(policy) if policy else None,
        "replaced_by": instance.replaced_by,
        "checkpoint_dir": backup_dir(instance.order.checkpoint_uri),
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


class ExtendForm(forms.Form):
    hours = forms.IntegerField(min_value=1)


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
        f"Cancelled the order for {order.count}× {order.instance_type.name} in "
        f"{order.project.slug}; nothing was launched.",
    )
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("hosts")


# --- approvals -----------------------------------------------------------------------------------


def approvals(request: HttpRequest) -> HttpResponse:
    """The approval inbox of managers and admins."""
    if not permissions.is_approver(request.user):
        return forbidden(request, "Only admins and project managers approve orders.")
    pending = (
        orders_to_decide(request.user)
        .select_related("requester", "project", "instance_type", "image")
        .order_by("created_at")
    )
    decided = (
        Order.objects.filter(decided_by__isnull=False)
        .filter(project__in=permissions.visible_projects(request.user))
        .select_related("requester", "project", "instance_type", "decided_by")
        .order_by("-decided_at")[:10]
    )
    return render(request, "instances/approvals.html", {"pending": pending, "decided": decided})


@require_POST
@service_errors(back="approvals")
def approval_decide(request: HttpRequest, pk, decision: str) -> HttpResponse:
    order = get_object_or_404(Order.objects.for_user(request.user).distinct(), pk=pk)
    reason = request.POST.get("reason", "")
    if decision == "approve":
        services.order_approve(order=order, user=request.user, reason=reason)
        messages.success(
            request,
            f"Approved {order.count}× {order.instance_type.name} for "
            f"{order.requester.username}; provisioning has started.",
        )
    elif decision == "reject":
        services.order_reject(order=order, user=request.user, reason=reason)
        messages.success(request, f"Rejected the order of {order.requester.username}.")
    else:
        # Through service_errors like any refusal: the message, and a denied audit row.
        raise ValidationError("Approve or reject.", code="unknown_decision")
    return redirect("approvals")
