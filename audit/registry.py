"""The wiring between apps: where a lower app finds the code of a higher one (docs/design.md
rule 9).

Imports run one way (audit <- portal <- instances <- billing <- demo), yet a lower app sometimes
needs a higher one: an order (instances) must pass the budget (billing), the dashboard (portal)
shows hosts (instances) and spend (billing). Each such need is a store declared here, with the
shape of the callable it holds (a Protocol) and, for a store of many pieces, the order they run
in. Each app registers its own pieces in its ``AppConfig.ready()``; the lower app asks the store.
audit is the lowest app, so every app reaches this module without an upward import.

Two kinds of store:

- ``Pieces``: named callables, always in the order the store declares (admission: quota, then
  budget), whatever order the apps are installed or made ready in. A name the store does not
  declare, a name registered twice, or a callable of the wrong shape is refused at once.
- ``Slot``: exactly one callable (what a host has cost). A second registration is refused;
  asking an empty slot raises ImproperlyConfigured naming it.

``registry`` maps each store's name to the store (no store is added after import), and
``wiring_problems()`` lists what is declared and not registered: a Django system check
(``audit.E100``) reports it at start, and tests/test_wiring.py prints the whole wiring.

The shapes name other apps' types only in words (audit may not import them): a request is
``instances.services.orders.OrderRequest``, a panel ``portal.panels.Panel``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, Protocol, TypeVar

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

F = TypeVar("F", bound=Callable[..., Any])


class WiringError(ImproperlyConfigured):
    """A piece registered where it does not fit: an unknown name, twice, or the wrong shape."""


def _label(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _fits(fn: Callable, shape: type) -> bool:
    """Whether ``fn`` can be called as the shape's ``__call__`` is (same positional arguments,
    same keyword-only names)."""
    params = list(inspect.signature(shape.__call__).parameters.values())[1:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    args = [object() for p in params if p.kind in positional]
    kwargs = {p.name: object() for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY}
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


class _Store(Generic[F]):
    def __init__(self, name: str, shape: type, doc: str) -> None:
        self.name, self.shape, self.doc = name, shape, doc

    def _check_shape(self, fn: Callable) -> None:
        if not _fits(fn, self.shape):
            wanted = inspect.signature(self.shape.__call__)
            raise WiringError(
                f"{_label(fn)} cannot be registered in {self.name}: it must be callable as "
                f"{self.shape.__name__}{wanted} ({self.doc})."
            )


class Pieces(_Store[F]):
    """Named callables run in the declared order (``order``: every name the store expects)."""

    def __init__(self, name: str, shape: type, doc: str, order: Iterable[str]) -> None:
        super().__init__(name, shape, doc)
        self.order = tuple(order)
        self._pieces: dict[str, F] = {}

    def register(self, key: str, fn: F) -> F:
        if key not in self.order:
            raise WiringError(
                f"{self.name} has no place for {key!r} ({_label(fn)}); it declares, in order: "
                f"{', '.join(self.order)} (audit/registry.py)."
            )
        if key in self._pieces:
            raise WiringError(
                f"{self.name} already holds {key!r} ({_label(self._pieces[key])}); "
                f"{_label(fn)} was registered for it a second time."
            )
        self._check_shape(fn)
        self._pieces[key] = fn
        return fn

    def items(self) -> list[tuple[str, F]]:
        """(name, callable) in the declared order; a test's replacement in its own order."""
        ranks = {key: rank for rank, key in enumerate(self.order)}
        return sorted(self._pieces.items(), key=lambda item: ranks.get(item[0], len(ranks)))

    def __iter__(self) -> Iterator[F]:
        return iter([fn for _, fn in self.items()])

    def missing(self) -> list[str]:
        return [key for key in self.order if key not in self._pieces]

    @contextmanager
    def replaced(self, pieces: Mapping[str, F]) -> Iterator[None]:
        """For tests: the store holds exactly ``pieces`` (any names, in the order given) until
        the block ends, then what it held before."""
        for fn in pieces.values():
            self._check_shape(fn)
        kept, self._pieces, order = self._pieces, dict(pieces), self.order
        self.order = tuple(pieces) + tuple(key for key in order if key not in pieces)
        try:
            yield
        finally:
            self._pieces, self.order = kept, order


class Slot(_Store[F]):
    """Exactly one callable, registered once."""

    def __init__(self, name: str, shape: type, doc: str) -> None:
        super().__init__(name, shape, doc)
        self._fn: F | None = None

    def register(self, fn: F) -> F:
        if self._fn is not None:
            raise WiringError(
                f"{self.name} is already answered by {_label(self._fn)}; "
                f"{_label(fn)} was registered for it a second time."
            )
        self._check_shape(fn)
        self._fn = fn
        return fn

    def get(self) -> F:
        if self._fn is None:
            raise ImproperlyConfigured(
                f"Nothing is registered in {self.name} ({self.doc}): the app that answers it "
                "registers it in its AppConfig.ready(); is that app in INSTALLED_APPS?"
            )
        return self._fn

    def items(self) -> list[tuple[str, F]]:
        return [] if self._fn is None else [(self.name, self._fn)]

    def missing(self) -> list[str]:
        return [] if self._fn is not None else [self.name]

    @contextmanager
    def replaced(self, fn: F | None) -> Iterator[None]:
        """For tests: the slot holds ``fn`` (or nothing) until the block ends."""
        if fn is not None:
            self._check_shape(fn)
        kept, self._fn = self._fn, fn
        try:
            yield
        finally:
            self._fn = kept


# --- the shapes ----------------------------------------------------------------------------


class AdmissionCheck(Protocol):
    """May this order (or lease extension, or pool launch) be admitted? Run under the project's
    row lock with an OrderRequest; raises a portal.lib.errors.Conflict to refuse."""

    def __call__(self, request: Any, /) -> None: ...


class OrderHeadroom(Protocol):
    """What each limit leaves an OrderRequest: a list of instances.selectors.headroom.Headroom."""

    def __call__(self, request: Any, /) -> list: ...


class DashboardPanel(Protocol):
    """A dashboard panel for the viewer and every project they see: a portal.panels.Panel, or
    None when it has nothing for this viewer."""

    def __call__(self, user: Any, projects: list, /) -> Any: ...


class MetricsCollector(Protocol):
    """The gauges an app computes at scrape time (prometheus_client metric families)."""

    def __call__(self) -> Iterable: ...


class PriceChanged(Protocol):
    """An instance type's list price was just set, in the writer's transaction."""

    def __call__(self, *, instance_type: Any) -> Any: ...


class InstanceCost(Protocol):
    """What each host has cost up to ``now``: {instance pk: Decimal dollars}; or, for the cost
    notes, {instance pk: a sentence or ""}."""

    def __call__(self, instances: list, /, *, now: datetime) -> dict: ...


class InstanceRate(Protocol):
    """What a host costs per hour now, in Decimal dollars."""

    def __call__(self, instance: Any, /) -> Decimal: ...


class IsolationCheck(Protocol):
    """May a project take these isolation values (portal's Project fields)? Raises Django's
    ValidationError, keyed by field, to refuse; called before the change is saved."""

    def __call__(self, project: Any, /, *, values: dict) -> None: ...


# --- the stores ----------------------------------------------------------------------------

ADMISSION_CHECKS: Pieces[AdmissionCheck] = Pieces(
    "order_admission_checks",
    AdmissionCheck,
    "callable(order_request) raising Conflict to refuse",
    # The quota's answer names the limit a researcher can ask to raise; the budget's only
    # matters once the order fits the quota. Both run under the same project lock.
    order=("quota", "budget"),
)
ORDER_HEADROOM: Pieces[OrderHeadroom] = Pieces(
    "order_headroom",
    OrderHeadroom,
    "callable(order_request) -> list[Headroom]",
    order=("quota", "budget"),
)
DASHBOARD_PANELS: Pieces[DashboardPanel] = Pieces(
    "dashboard_panels",
    DashboardPanel,
    "callable(user, projects) -> Panel | None",
    # The dashboard draws panels of one place in this order.
    order=("operations", "summary", "quota", "hosts", "pools", "budget", "spend"),
)
METRICS_COLLECTORS: Pieces[MetricsCollector] = Pieces(
    "metrics_collectors",
    MetricsCollector,
    "callable() -> metric families",
    order=("celery_queues", "celery_beat", "audit", "hosts", "pools", "billing"),
)
PRICE_CHANGED: Pieces[PriceChanged] = Pieces(
    "price_changed",
    PriceChanged,
    "callable(*, instance_type)",
    order=("price_history",),
)
ISOLATION_CHECKS: Pieces[IsolationCheck] = Pieces(
    "isolation_checks",
    IsolationCheck,
    "callable(project, *, values) raising ValidationError to refuse",
    order=("pools",),
)
INSTANCE_COST: Slot[InstanceCost] = Slot(
    "instance_cost", InstanceCost, "callable(instances, *, now) -> {pk: Decimal dollars}"
)
INSTANCE_RATE: Slot[InstanceRate] = Slot(
    "instance_rate", InstanceRate, "callable(instance) -> Decimal dollars per hour"
)
INSTANCE_COST_NOTES: Slot[InstanceCost] = Slot(
    "instance_cost_notes", InstanceCost, "callable(instances, *, now) -> {pk: sentence}"
)


class Registry(Mapping[str, "Pieces | Slot"]):
    """Every store by name, read-only: stores are declared in this module, never added later."""

    def __init__(self, stores: Iterable[Pieces | Slot]) -> None:
        self._stores = {store.name: store for store in stores}

    def __getitem__(self, name: str) -> Pieces | Slot:
        return self._stores[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)

    def __len__(self) -> int:
        return len(self._stores)


registry = Registry(
    [
        ADMISSION_CHECKS,
        ORDER_HEADROOM,
        DASHBOARD_PANELS,
        METRICS_COLLECTORS,
        PRICE_CHANGED,
        ISOLATION_CHECKS,
        INSTANCE_COST,
        INSTANCE_RATE,
        INSTANCE_COST_NOTES,
    ]
)


def wiring() -> dict[str, list[tuple[str, str]]]:
    """Each store's name -> its (piece name, dotted path of the callable), in order."""
    return {
        name: [(key, _label(fn)) for key, fn in store.items()] for name, store in registry.items()
    }


def wiring_problems() -> list[str]:
    """Every declared piece nobody registered, as a sentence each."""
    return [
        f"{name} has nothing registered for {key!r}: the app that answers it registers it in "
        "its AppConfig.ready()."
        for name, store in registry.items()
        for key in store.missing()
    ]


def check_wiring(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The system check: a missing piece stops `manage.py check`, migrate and runserver."""
    return [checks.Error(problem, id="audit.E100") for problem in wiring_problems()]
