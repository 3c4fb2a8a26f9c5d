"""The portal's Prometheus metrics: what each process counts, and what a scrape computes.

Two kinds of figure:

- Counters and histograms that a process updates as work happens (requests, orders, cloud
  calls, tasks, reconcile passes). With ``PROMETHEUS_MULTIPROC_DIR`` set, prometheus-client
  keeps them in memory-mapped files in that folder, one per process, and a scrape sums the files
  of every gunicorn and Celery worker process sharing the folder (its multiprocess mode). The
  variable must be set before the process starts (the client reads it at import).
- Gauges read from the database, Redis and the cache at scrape time (hosts by status, metering
  and seal lag, queue depth, beat's last runs). Each app that has such figures registers a
  collector in audit/registry.py's ``metrics_collectors`` (in its AppConfig.ready(), so this
  module never imports a later app); each collector runs a fixed number of queries whatever the
  number of hosts.

Every metric name starts with ``portal_``; the Grafana dashboard (deploy/grafana/) and
tests/portal/test_ops_files.py read them from here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

from django.conf import settings
from prometheus_client import REGISTRY as PROCESS_REGISTRY
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from audit.registry import METRICS_COLLECTORS

log = logging.getLogger(__name__)

# Seconds: requests are fast, provisioning takes seconds to minutes, reconcile passes between.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PROVISION_BUCKETS = (1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800)
TASK_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

REQUESTS = Counter(
    "portal_http_requests",
    "HTTP requests answered, by route pattern, method and status code.",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "portal_http_request_duration_seconds",
    "Time to answer an HTTP request, by route pattern and method.",
    ["route", "method"],
    buckets=REQUEST_BUCKETS,
)
ORDERS = Counter(
    "portal_orders",
    "Orders submitted, by outcome: admitted, held (for approval), refused_quota, refused_budget, "
    "refused_other.",
    ["outcome"],
)
PROVISION_SECONDS = Histogram(
    "portal_provisioning_seconds",
    "Seconds from a host's order (its row) to running, by instance type and market.",
    ["instance_type", "market"],
    buckets=PROVISION_BUCKETS,
)
CLOUD_CALLS = Counter(
    "portal_cloud_calls",
    "Calls to the cloud provider, by provider and call.",
    ["provider", "call"],
)
CLOUD_ERRORS = Counter(
    "portal_cloud_errors",
    "Failed calls to the cloud provider, by provider, call and kind (transient, permanent, other).",
    ["provider", "call", "kind"],
)
RECONCILE_ACTIONS = Counter(
    "portal_reconcile_actions",
    "What reconcile passes did, by kind (enqueued, updated, adopted, ghosts, orphans_terminated, "
    "doubles_terminated, deferred).",
    ["kind"],
)
RECONCILE_SECONDS = Histogram(
    "portal_reconcile_duration_seconds",
    "Seconds one reconcile pass took.",
    buckets=TASK_BUCKETS,
)
TASKS = Counter(
    "portal_celery_tasks",
    "Celery tasks finished, by task name and state (success, failure, retry).",
    ["task", "state"],
)
TASK_SECONDS = Histogram(
    "portal_celery_task_duration_seconds",
    "Seconds a Celery task ran, by task name.",
    ["task"],
    buckets=TASK_BUCKETS,
)

AUTOSCALER_HOSTS = Counter(
    "portal_autoscaler_hosts",
    "Hosts the autoscaler launched or ended, by action (launched, ended) and market.",
    ["action", "market"],
)
AUTOSCALER_REFUSALS = Counter(
    "portal_autoscaler_refusals",
    "Scale-outs a limit held back (the pool launched what fit), by limit: quota, budget, other.",
    ["limit"],
)
AUTOSCALER_SECONDS = Histogram(
    "portal_autoscaler_pass_duration_seconds",
    "Seconds one autoscaler pass over every pool took.",
    buckets=TASK_BUCKETS,
)

# Every metric this module and the scrape-time collectors define, for the files that use them.
SCRAPE_METRICS = (
    "portal_hosts",
    "portal_pool_hosts",
    "portal_pool_desired_hosts",
    "portal_pool_max_hosts",
    "portal_pool_refusal_streak",
    "portal_metering_lag_seconds",
    "portal_audit_seal_lag_seconds",
    "portal_celery_queue_length",
    "portal_beat_last_run_timestamp_seconds",
    "portal_beat_last_run_age_seconds",
)


# prometheus-client chose at import whether this process writes its values to files.
PROCESS_WRITES_FILES = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def mark_process_dead(pid: int) -> None:
    """gunicorn's child_exit hook: drop a dead worker's live gauges (counters keep counting)."""
    if PROCESS_WRITES_FILES:
        multiprocess.mark_process_dead(pid)


class ScrapeCollector:
    """Runs every registered collector (audit/registry.py) when the registry is scraped.

    A collector is a callable returning metric families; one that fails is logged and skipped,
    so a broken figure never hides the rest.
    """

    def __init__(self, collectors: Iterable[tuple[str, Callable[[], Iterable[Metric]]]]) -> None:
        self.collectors = list(collectors)

    def collect(self) -> Iterable[Metric]:
        for name, collector in self.collectors:
            try:
                yield from list(collector())
            except Exception:
                log.exception("metrics: collector %s failed", name)


def scrape() -> bytes:
    """The whole exposition: every process's counters plus the scrape-time gauges."""
    registry = CollectorRegistry()
    folder = settings.PORTAL_METRICS_DIR
    if folder and os.path.isdir(folder):
        multiprocess.MultiProcessCollector(registry, path=folder)
    if not PROCESS_WRITES_FILES:
        # This process counts in memory (runserver, a test): add its own counters. A process
        # in multiprocess mode has them in the folder already, and must not count them twice.
        # (A test that points PORTAL_METRICS_DIR at a worker's folder gets a series twice,
        # once from each side; production sets the variable for every process.)
        registry.register(PROCESS_REGISTRY)
    registry.register(ScrapeCollector(METRICS_COLLECTORS.items()))
    return generate_latest(registry)


def gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    """A scrape-time gauge family; collectors fill it with add_metric()."""
    return GaugeMetricFamily(name, documentation, labels=labels)
