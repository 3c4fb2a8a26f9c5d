"""instances/views/catalog.py: the catalog page, cards of the instance types researchers may
order with their specs, prices and the images that run on each."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from instances.api.catalog import CatalogFilter
from instances.models import (
    Image,
    InstanceType,
)
from instances.providers import provider_class
from instances.selectors.mig import mig_slices
from portal import permissions

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
        types = list(filterset.qs)
        slices: dict = {}
        for piece in mig_slices(types):
            slices.setdefault(piece.instance_type.pk, []).append(piece)
        for instance_type in types:
            cards.append(
                {
                    "type": instance_type,
                    "images": instance_type.compatible_images(images),
                    "slices": slices.get(instance_type.pk, []),
                }
            )
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
        "mig_orderable": provider_class().offers_slice_sessions(),
    }
    return render(request, "instances/catalog.html", context, status=200 if valid else 400)
