"""instances/selectors/headroom.py: what an order may still ask for, shown before it is placed
(the order page, the approval inbox): the headroom each limit leaves and whether the checks
``order_submit`` runs would refuse or hold it.

Each piece of audit/registry.py's ``order_headroom`` is ``callable(request) -> list[Headroom]``
(the quota's in instances/services/quotas.py, the budget's from billing, registered in its
AppConfig.ready(), so instances never imports billing). Refusals come from running the
admission checks themselves and the approval reason from ``approval_needed``: what the page says
is what the submit will do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from audit.registry import ORDER_HEADROOM
from instances.services.admission import first_refusal
from instances.services.orders import OrderRequest, approval_needed


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
    # Whether a granted request for more quota would lift the refusal (the project's GPUs).
    refusal_raisable: bool = False
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
    for piece in ORDER_HEADROOM:
        headroom.extend(piece(request))
    refusal = first_refusal(request)
    return Preview(
        headroom=headroom,
        refusal=refusal.message if refusal else "",
        refusal_code=refusal.code if refusal else "",
        refusal_raisable=getattr(refusal, "raisable", False),
        approval=approval_needed(request) or "",
    )
