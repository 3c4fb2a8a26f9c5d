"""Pages of the instances app: the catalog, the order page, My hosts, a host's page, and the
approval inbox of managers and admins."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from instances import services
from instances.api.filters import CatalogFilter
from instances.models import (
    Image,
    InstanceType,
    Order,
)
from instances.selectors.headroom import order_preview
from instances.selectors.orders import orders_to_decide
from portal import permissions
from portal.pages import forbidden, note_refusal, refusal_code, service_errors

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


# --- approvals -----------------------------------------------------------------------------------


def _approvals_page(
    request: HttpRequest, *, errors: dict | None = None, typed: dict | None = None, status=200
) -> HttpResponse:
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
            f"Approved {order.count}× {order.instance_type.name} for "
            f"{order.requester.username}; provisioning has started.",
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
