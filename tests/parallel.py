"""What gives each pytest-xdist worker (``make test`` runs several) services of its own, and
the order that lets the workers finish together.

pytest-django already gives each worker its own database (test_<name>_gw<N>); imported by
tests/settings.py before the settings read the environment, this module gives it a Redis number
and a var/ folder of its own, so the Celery workers, queues and audit witness files one test
starts are never seen by a test on another worker. They are set in the environment, so the
servers and workers a test starts inherit them. A process started that way imports this module
again with the worker's name still set; ``PORTAL_TEST_SERVICES_OF`` records that the environment
is already its worker's, so it is not renumbered a second time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")


def own_redis_number(url: str, worker: int) -> str:
    """The URL with the Redis database numbered for one worker: the number the URL names plus
    1 + the worker's, modulo Redis's 16 (CI's /15 gives workers /0, /1, /2...)."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base + 1 + worker) % 16}"))


def own_services(environ=os.environ) -> None:
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    if environ.get("PORTAL_TEST_SERVICES_OF") == worker:
        return
    environ["PORTAL_TEST_SERVICES_OF"] = worker
    number = int(worker[2:])
    for name in ("CELERY_BROKER_URL", "PORTAL_CACHE_URL"):
        if environ.get(name, "").startswith(("redis://", "rediss://")):
            environ[name] = own_redis_number(environ[name], number)
    var = environ.get("PORTAL_VAR_DIR") or os.path.join(os.path.dirname(__file__), "..", "var")
    environ["PORTAL_VAR_DIR"] = os.path.abspath(os.path.join(var, f"test-{worker}"))


def first_block_sizes(total: int, workers: int) -> list[int]:
    """How many tests ``--dist worksteal`` hands each worker at the start: the collection in
    order, cut into one contiguous block per worker (xdist's WorkStealingScheduling sends
    each idle worker ``len(pending) // workers_left``)."""
    sizes, left = [], total
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


def long_ones_first(items: Sequence[T], workers: int, is_long: Callable[[T], bool]) -> list[T]:
    """The collection reordered so that each worker's first block starts with its share of
    the long tests (browsers, real workers, the fuzz, the sweeps), dealt round-robin, and fills
    up with short ones in collection order.

    Worksteal lets an idle worker take the back half of the longest queue. In collection order
    the long tests sat at the backs of the blocks (tests/instances/test_spot_recovery_worker.py
    and test_worker.py come late in their folder), so they were what got stolen, at the end,
    and three or four minutes of them ran after every short test was done. Started first,
    they overlap the short tests, and what is left to steal at the end is short."""
    if workers < 2:
        return list(items)
    long, short = [], []
    for item in items:
        (long if is_long(item) else short).append(item)
    dealt: list[list[T]] = [long[index::workers] for index in range(workers)]
    ordered: list[T] = []
    taken = 0
    for index, size in enumerate(first_block_sizes(len(items), workers)):
        fill = max(0, size - len(dealt[index]))
        ordered += dealt[index] + short[taken : taken + fill]
        taken += fill
    return ordered + short[taken:]


own_services()
