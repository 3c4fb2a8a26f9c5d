"""Pages of the instances app: the catalog, the order page, My hosts, a host's page, and the
approval inbox of managers and admins."""

from __future__ import annotations

import uuid

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from instances import services
from instances.api.filters import CatalogFilter
from instances.models import (
    Image,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
)
from instances.selectors import orders_to_decide
from portal import permissions
from portal.models import Project
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
            return redirect(f"{reverse('hosts')}?new={order.pk}")
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
        messages.error(request, "Approve or reject.")
    return redirect("approvals")
