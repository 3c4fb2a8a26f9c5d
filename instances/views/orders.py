"""instances/views/orders.py: the order page and the approval inbox.

The order page: its form (instances/forms/), the estimate beside it with the limits the order
runs into, and the submit. The rules are order_submit's (``order_validate``, the admission
checks, the approval policy, through ``instances.selectors.headroom.order_preview``); this
module only says them in the page's words, beside the field they are about. The approval inbox
of managers and admins shows the held orders they may decide, with the headroom each would
leave, and takes their decision.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from instances import services
from instances.forms import OrderForm
from instances.models import (
    Image,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
    Placement,
    Quota,
    gpu_equivalents,
    gpus_in_words,
)
from instances.selectors.clusters import order_size_bounds
from instances.selectors.headroom import Preview, order_preview
from instances.selectors.mig import mig_slice
from instances.selectors.orders import orders_to_decide
from instances.selectors.quotas import holders_of, longest_lease, usage
from portal import permissions
from portal.lib.errors import PortalError
from portal.lib.pages import (
    forbidden,
    form_errors,
    mark_invalid,
    note_refusal,
    refusal_code,
    service_errors,
)
from portal.models import Project
from portal.templatetags.portal_tags import RATE, usd

# Refusals of the admission checks by code, and the field each is about.
REFUSAL_FIELDS = {
    "quota_exceeded": "count",
    "quota_lease": "lease_hours",
    "quota_market": "market",
}


def order_words(*, instance_type: InstanceType, longest: int):
    """The order page's words for order_validate's and the admission checks' refusals."""

    def words(name: str | None, error) -> tuple[str | None, str] | None:
        code = getattr(error, "code", "")
        params = getattr(error, "params", None) or {}
        if isinstance(error, PortalError):
            if code == "quota_lease":
                return "lease_hours", f"A lease can last at most {longest} hours in this project."
            return REFUSAL_FIELDS.get(code), error.message
        if (name, code) == ("count", "out_of_range"):
            most = params.get("max", settings.PORTAL_ORDER_MAX_COUNT)
            return name, f"Choose between 1 and {most} hosts."
        if (name, code) == ("nodes", "out_of_range"):
            most = params.get("max", settings.PORTAL_CLUSTER_MAX_NODES)
            return "count", f"A cluster has 2 to {most} hosts."
        if (name, code) == ("lease_hours", "out_of_range"):
            most = params.get("max", settings.PORTAL_LEASE_MAX_HOURS)
            if longest < most:
                return name, f"A lease can last at most {longest} hours in this project."
            return name, f"A lease lasts from 1 to {most} hours."
        if (name, code) == ("max_spot_price", "below_spot_price") and params:
            return name, (
                f"Your maximum spot price {usd(params['price'], RATE)}/h is below the current "
                f"spot price {usd(params['current'], RATE)}/h, so the host would not launch: "
                "raise it or leave it empty."
            )
        if (name, code) == ("max_spot_price", "min_value"):
            return (
                name,
                "A maximum spot price is more than $0; leave it empty to pay up to on-demand.",
            )
        if (name, code) == ("market", "spot_not_offered"):
            return name, f"Spot is not offered for {instance_type.name}; choose on-demand."
        return None

    return words


def _number(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _price(value) -> Decimal | None:
    try:
        price = Decimal(str(value).strip()) if value not in (None, "") else None
    except InvalidOperation:
        return None
    return price if price is None or price.is_finite() else None


def order_context(request: HttpRequest, instance_type: InstanceType, data) -> dict:
    """The estimate panel: what the order would cost, or why it is not valid yet; the limits
    it runs into; and the inputs' real bounds. Every rule is order_validate's and the admission
    checks' (the SSH key is left to the submit)."""
    user = request.user
    projects = list(permissions.orderable_projects(user))
    project = next((p for p in projects if p.slug == data.get("project")), None)
    project = project or (projects[0] if projects else None)
    images = list(instance_type.compatible_images())
    image = next((i for i in images if i.name == data.get("image")), None)
    image = image or (images[0] if images else None)
    market = data.get("market") if data.get("market") in Market.values else Market.ON_DEMAND
    if market == Market.SPOT and not instance_type.spot_offered:
        market = Market.ON_DEMAND
    placement = data.get("placement")
    placement = placement if placement in Placement.values else Placement.INDEPENDENT
    count = _number(data.get("count") or (2 if placement == Placement.CLUSTER else 1))
    sliced = mig_slice(instance_type, data.get("mig_profile") or "")
    profile = sliced.profile if sliced else None
    lease = _number(data.get("lease_hours") or settings.PORTAL_LEASE_DEFAULT_HOURS)
    longest = settings.PORTAL_LEASE_MAX_HOURS
    if project is not None:
        longest, _ = longest_lease(project=project, user=user)
    context = {
        "t": instance_type,
        "market": market,
        "placement": placement,
        "count": count,
        "lease_hours": lease,
        "estimate": None,
        "invalid": [],
        "preview": Preview(),
        "placement_hint": _placement_hint(instance_type, placement),
        "slice": sliced,
        "count_min": order_size_bounds(placement)[0],
        "count_max": order_size_bounds(placement)[1],
        "count_hint": f"Up to {order_size_bounds(placement)[1]} in one order.",
        "lease_max": longest,
        "project": project,
    }
    if project is None or image is None:
        # Nothing to check against (finance, or a member of no project): the price alone.
        least, most = order_size_bounds(placement)
        if count is None or not least <= count <= most:
            context["invalid"].append(f"Choose between {least} and {most} hosts.")
        if lease is None or not 1 <= lease <= longest:
            context["invalid"].append(f"A lease lasts from 1 to {longest} hours.")
        if not context["invalid"]:
            context.update(_priced(instance_type, market, count, lease, profile))
        return context
    words = order_words(instance_type=instance_type, longest=longest)
    fields = {
        "requester": user,
        "project": project,
        "instance_type": instance_type,
        "image": image,
        "market": market,
        "ssh_public_key": "",
        "key_required": False,
        "max_spot_price": _price(data.get("max_spot_price")) if market == Market.SPOT else None,
        "interruption_policy": InterruptionPolicy.NOTIFY if market == Market.SPOT else "",
        "placement": placement,
        "mig_profile": profile.name if profile else "",
    }
    try:
        order = services.order_validate(
            count=count if count is not None else 0,
            lease_hours=lease if lease is not None else 0,
            **fields,
        )
    except ValidationError as error:
        for name, problems in error.error_dict.items():
            for problem in problems:
                said = words(name, problem)
                context["invalid"].append(said[1] if said else " ".join(problem.messages))
        # The limits still show, for the smallest order of this kind.
        fields.update(max_spot_price=None)
        try:
            smallest = order_size_bounds(placement)[0]
            order = services.order_validate(count=smallest, lease_hours=1, **fields)
        except ValidationError:
            return context
        context["preview"] = order_preview(order)
        return _bounded(context)
    preview = order_preview(order)
    if preview.refusal_code == "quota_lease":
        context["invalid"].append(words(None, PortalError("", code="quota_lease"))[1])
    context.update(preview=preview, **_priced(instance_type, market, count, lease, profile))
    if preview.refusal_code.startswith("quota"):
        context.update(_quota_blocked(user, project, order.gpus, preview))
    return _bounded(context)


def _placement_hint(instance_type: InstanceType, placement: str) -> str:
    if placement != Placement.CLUSTER:
        return (
            "Each host on its own. Choose one cluster to train across hosts with "
            "MultiWorkerMirroredStrategy."
        )
    efa = instance_type.efa_interfaces
    network = f", each with {efa} EFA interface{'s' if efa != 1 else ''}" if efa else ""
    return (
        f"The hosts launch together, all or none, in one placement group and zone{network}; "
        "every node gets its rank and the TF_CONFIG MultiWorkerMirroredStrategy reads."
    )


def _quota_blocked(user, project: Project, asks_gpus, preview) -> dict:
    """Beside a quota refusal: who holds the quota now, and the way to ask for more when a
    granted request would lift the refusal, prefilled with what the order lacks (the GPUs over
    the project's limit, whole: a grant raises the limit by whole GPUs)."""
    used = usage(project=project)
    askable = preview.refusal_raisable and permissions.can_request_quota(user, project)
    short = 0
    limit = (
        Quota.objects.filter(project=project, user=None).values_list("max_gpus", flat=True).first()
        if askable
        else None
    )
    if limit is not None:  # (None: the limit went since the preview read it)
        short = max(1, math.ceil(used.gpus + asks_gpus - limit))
    return {
        "holders": holders_of([project.pk])[project.pk],
        "holders_gpus": used.gpus,
        "holders_hosts": used.instances,
        "request_gpus": short,
    }


def _bounded(context: dict) -> dict:
    """The Hosts input's bound: the portal's most hosts in one order, or fewer where the
    quotas hold fewer (at least 1: a full quota is said by the refusal, not by the input)."""
    fit = context["preview"].hosts_fit
    least, most = order_size_bounds(context["placement"])
    said = f"Up to {most} in one order" if least == 1 else f"{least} to {most} in one cluster"
    context["count_min"], context["count_max"] = least, most
    context["count_hint"] = f"{said}."
    if fit is not None:
        context["count_max"] = max(least, min(most, fit))
        if fit < most:
            room = f"room for {fit}" if fit else "no room left"
            context["count_hint"] = f"{said}; the quota has {room} now."
    return context


def _priced(instance_type: InstanceType, market: str, count: int, lease: int, profile=None) -> dict:
    def estimate(market: str):
        return services.order_estimate(
            instance_type=instance_type,
            market=market,
            count=count,
            lease_hours=lease,
            mig_profile=profile,
        )

    chosen = estimate(market)
    return {
        "estimate": chosen,
        "gpu_hours": gpus_in_words(count * lease * gpu_equivalents(instance_type, profile)),
        "saving": estimate(Market.ON_DEMAND).per_lease - chosen.per_lease,
    }


@service_errors()
def order_page(request: HttpRequest, name: str) -> HttpResponse:
    """Order hosts of one catalog type: the form, the live estimate and limits, the submit."""
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
    source = (
        request.POST
        if request.method == "POST"
        else {key: value for key, value in initial.items() if value is not None}
    )
    context = order_context(request, instance_type, source)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        words = order_words(instance_type=instance_type, longest=context["lease_max"])
        with form_errors(form, words):
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
                placement=data["placement"] or Placement.INDEPENDENT,
                mig_profile=data["mig_profile"],
            )
            what = f"{order.described} ({order.get_market_display()})"
            if order.is_cluster:
                what = f"a cluster of {what}"
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
    context.update(form=mark_invalid(form), images=instance_type.compatible_images())
    status = 400 if request.method == "POST" else 200
    return render(request, "instances/order.html", context, status=status)


def order_estimate_partial(request: HttpRequest, name: str) -> HttpResponse:
    """The estimate panel, re-rendered by htmx as the form changes."""
    instance_type = get_object_or_404(InstanceType.objects.offered(), name=name)
    return render(
        request, "instances/_estimate.html", order_context(request, instance_type, request.GET)
    )


# --- approvals -----------------------------------------------------------------------------------


def _approvals_page(
    request: HttpRequest, *, errors: dict | None = None, typed: dict | None = None, status=200
) -> HttpResponse:
    pending = (
        orders_to_decide(request.user)
        .select_related("requester", "project", "instance_type", "image", "pool", "mig_profile")
        .order_by("created_at")
    )
    decided = (
        Order.objects.filter(decided_by__isnull=False)
        .filter(project__in=permissions.visible_projects(request.user))
        .select_related(
            "requester", "project", "instance_type", "decided_by", "pool", "mig_profile"
        )
        .order_by("-decided_at")[:10]
    )
    errors, typed = errors or {}, typed or {}
    rows = [
        {
            "o": order,
            # What approving would leave and whether it would fail now: the admission checks
            # order_approve runs, on the same request.
            "preview": order_preview(services.order_request_of(order)),
            "error": errors.get(order.pk, ""),
            "typed": typed.get(order.pk, ""),
        }
        for order in pending
    ]
    context = {"pending": rows, "decided": decided}
    return render(request, "instances/approvals.html", context, status=status)


def approvals(request: HttpRequest) -> HttpResponse:
    """The approval inbox of managers and admins, with the headroom each order would leave."""
    if not permissions.is_approver(request.user):
        return forbidden(request, "Only admins and project managers approve orders.")
    return _approvals_page(request)


@require_POST
@service_errors(back="approvals")
def approval_decide(request: HttpRequest, pk, decision: str) -> HttpResponse:
    order = get_object_or_404(Order.objects.for_user(request.user).distinct(), pk=pk)
    reason = request.POST.get("reason", "")
    if decision == "approve":
        services.order_approve(order=order, user=request.user, reason=reason)
        messages.success(
            request,
            f"Approved pool {order.pool.name} of {order.requester.username}: it may grow to "
            f"{order.count}× {order.instance_type.name}; the autoscaler launches its hosts as "
            "the quota and budget allow."
            if order.pool_id
            else f"Approved {order.described} for {order.requester.username}; provisioning "
            "has started.",
        )
    elif decision == "reject":
        try:
            services.order_reject(order=order, user=request.user, reason=reason)
        except ValidationError as error:
            if "reason" not in getattr(error, "error_dict", {}):
                raise
            # Said at the reason's field, on the inbox itself (nothing was decided); a refusal
            # for the audit row like any other.
            note_refusal(refusal_code(error))
            return _approvals_page(
                request,
                errors={order.pk: " ".join(error.message_dict["reason"])},
                typed={order.pk: reason},
                status=400,
            )
        messages.success(request, f"Rejected the order of {order.requester.username}.")
    else:
        # Through service_errors like any refusal: the message, and a denied audit row.
        raise ValidationError("Approve or reject.", code="unknown_decision")
    return redirect("approvals")
