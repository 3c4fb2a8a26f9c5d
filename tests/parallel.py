"""What gives each pytest-xdist worker (``make test`` runs several) services of its own.

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
from urllib.parse import urlsplit, urlunsplit


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


own_services()
