"""instances/selectors/headroom.py: what an order may still ask for, shown before it is placed
(the order page, the approval inbox): the headroom each limit leaves and whether the checks
``order_submit`` runs would refuse or hold it.

Each entry of ``ORDER_HEADROOM`` is ``callable(request) -> list[Headroom]`` (the quota's in
instances/services/quotas.py, the budget's from billing: the ``ORDER_ADMISSION_CHECKS`` device,
so instances never imports billing). Refusals come from running the admission checks themselves
and the approval reason from ``approval_needed``: what the page says is what the submit will do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils.module_loading import import_string

from instances.services.orders import OrderRequest, approval_needed
from portal.errors import Conflict


@dataclass(frozen=True)
class Headroom:
    """One limit an order runs into: what is left of it now and what this order leaves."""

    label: str
    left: str
    after: str = ""
    over: bool = False
    note: str = ""
    # Whole hosts of this order's type that still fit, when the limit counts hosts or GPUs.
    hosts_fit: int | None = None


@dataclass(frozen=True)
class Preview:
    """An order before it is placed: the headroom of each limit, the admission refusal, the
    approval reason."""

    headroom: list[Headroom] = field(default_factory=list)
    refusal: str = ""
    refusal_code: str = ""
    approval: str = ""

    @property
    def hosts_fit(self) -> int | None:
        """Most hosts of this type the quotas still allow (None: no quota counts them)."""
        fits = [h.hosts_fit for h in self.headroom if h.hosts_fit is not None]
        return min(fits) if fits else None


def order_preview(request: OrderRequest) -> Preview:
    """The headroom and the answers order_submit would give now (read only: no lock is taken,
    so a concurrent order may still win the last GPU; the submit checks again under the lock)."""
    headroom: list[Headroom] = []
    for path in settings.ORDER_HEADROOM:
        headroom.extend(import_string(path)(request))
    refusal, code = "", ""
    for path in settings.ORDER_ADMISSION_CHECKS:
        try:
            import_string(path)(request)
        except Conflict as error:
            refusal, code = error.message, error.code
            break
    return Preview(
        headroom=headroom,
        refusal=refusal,
        refusal_code=code,
        approval=approval_needed(request) or "",
    )
