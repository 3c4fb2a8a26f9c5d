"""Celery tasks for hosts: thin wrappers that take ids and call one service (docs/design.md rule 4).

The provisioning queue runs with acks_late, reject-on-worker-lost and prefetch 1 (settings), so
a killed worker's task runs again; every service here is safe to run twice.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from instances import services
from instances.metrics import autoscale_counted, reconcile_counted
from instances.models import Instance
from instances.providers.base import NO_CAPACITY, ProviderPermanentError, ProviderTransientError
from instances.selectors.hosts import instance_load
from instances.services.jobs import jobs_pass
from portal.metrics import AUTOSCALER_SECONDS, RECONCILE_SECONDS

log = logging.getLogger(__name__)


def _missing(instance_id: str) -> bool:
    """A task can outlive its row (a test database dropped, a row never committed)."""
    if Instance.objects.filter(pk=instance_id).exists():
        return False
    log.warning("instance %s does not exist; nothing to do", instance_id)
    return True


def _backoff(retries: int) -> int:
    return min(settings.PORTAL_PROVISION_RETRY_BACKOFF_SECONDS * 2**retries, 300)


def _poll_if_moving(instance: Instance) -> None:
    if instance.status in Instance.MOVING and instance.cloud_id:
        sync_instance.apply_async((str(instance.pk),), countdown=2)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def provision_instance(self, instance_id: str) -> str:
    if _missing(instance_id):
        return "missing"
    try:
        instance = services.instance_provision(instance_id=instance_id)
    except ProviderTransientError as error:
        attempts = self.request.retries + 1
        final = attempts >= settings.PORTAL_PROVISION_MAX_RETRIES
        if error.code == NO_CAPACITY and services.spot_capacity_refused(
            instance_id=instance_id, attempts=attempts, final=final
        ):
            return instance_load(instance_id).status
        if final:
            instance = services.instance_fail(
                instance_id=instance_id,
                reason=services.failure_reason(
                    instance_load(instance_id), error, attempts=attempts
                ),
            )
            return instance.status
        log.info("provision %s: %s; retry %s", instance_id, error, attempts)
        raise self.retry(exc=error, countdown=_backoff(self.request.retries)) from error
    except ProviderPermanentError as error:
        instance = services.instance_fail(
            instance_id=instance_id,
            reason=services.failure_reason(instance_load(instance_id), error),
        )
        return instance.status
    _poll_if_moving(instance)
    return instance.status


def _action(task, instance_id: str, action: str) -> str:
    if _missing(instance_id):
        return "missing"
    try:
        instance = services.instance_cloud_action(instance_id=instance_id, action=action)
    except ProviderTransientError as error:
        raise task.retry(exc=error, countdown=_backoff(task.request.retries)) from error
    except ProviderPermanentError as error:
        log.warning("%s %s refused by the cloud: %s", action, instance_id, error)
        instance = services.instance_action_refused(
            instance_id=instance_id, action=action, error=error
        )
        return instance.status
    _poll_if_moving(instance)
    return instance.status


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=8)
def stop_instance(self, instance_id: str) -> str:
    return _action(self, instance_id, "stop")


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=8)
def start_instance(self, instance_id: str) -> str:
    return _action(self, instance_id, "start")


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=8)
def terminate_instance(self, instance_id: str) -> str:
    return _action(self, instance_id, "terminate")


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(ProviderTransientError,),
    retry_backoff=True,
    max_retries=5,
)
def sync_instance(self, instance_id: str, polls: int = 0) -> str:
    """Poll one host in a moving state until the cloud reports where it went."""
    if _missing(instance_id):
        return "missing"
    instance = services.instance_sync(instance_id=instance_id)
    if instance.status in Instance.MOVING and polls < 60:
        self.apply_async((instance_id, polls + 1), countdown=min(2 + polls, 15))
    return instance.status


@shared_task(autoretry_for=(ProviderTransientError,), retry_backoff=True, max_retries=3)
def reconcile() -> int:
    with RECONCILE_SECONDS.time():
        report = services.reconcile()
    reconcile_counted(report)
    if report.actions():
        log.info("reconcile: %s", report)
    if report.deferred:
        # The cloud refused some terminations for now (throttled): a pass sooner than beat's
        # next one, through the autoretry above.
        raise ProviderTransientError(
            f"{len(report.deferred)} hosts still to terminate", code="RequestLimitExceeded"
        )
    return report.actions()


@shared_task
def expire_leases() -> int:
    return len(services.leases_expire())


@shared_task
def warn_leases() -> int:
    return len(services.leases_warn())


@shared_task
def expire_orders() -> int:
    return len(services.orders_expire())


@shared_task
def collect_telemetry() -> int:
    return services.telemetry_collect().stored


@shared_task
def compact_telemetry() -> int:
    return services.telemetry_compact()


@shared_task
def stop_idle_hosts() -> int:
    report = services.idle_check()
    if report.warned or report.stopped or report.cleared:
        log.info(
            "idle stop: warned %s, stopped %s, called off %s",
            len(report.warned),
            len(report.stopped),
            len(report.cleared),
        )
    return len(report.stopped)


@shared_task
def drain_spot_events() -> int:
    """Hear the cloud's spot interruption warnings (SQS queue, or the simulated cloud)."""
    return services.spot_events_drain()


@shared_task
def pass_jobs() -> int:
    """The job pass (beat, PORTAL_JOB_SECONDS): lost hosts, refused orders, time limits, kept
    hosts whose time is up."""
    moved = jobs_pass()
    if any(moved.values()):
        log.info("job pass: %s", moved)
    return sum(moved.values())


@shared_task
def autoscale() -> int:
    """One autoscaler pass over every pool (beat, PORTAL_AUTOSCALE_SECONDS)."""
    with AUTOSCALER_SECONDS.time():
        report = services.autoscale()
    autoscale_counted(report)
    if report.launched or report.ended or report.refused:
        log.info(
            "autoscale: %s pools, launched %s, ended %s, refused %s",
            report.pools,
            len(report.launched),
            len(report.ended),
            len(report.refused),
        )
    return len(report.launched)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def start_notebook(notebook_id: str) -> str:
    """Start a host's JupyterLab (safe to run again: a notebook no longer starting is left)."""
    return services.notebook_launch(notebook_id=notebook_id).status


@shared_task(acks_late=True, reject_on_worker_lost=True)
def follow_mig_host(host_id: str) -> int:
    """A shared MIG host ran or ended: its slices follow it."""
    if _missing(host_id):
        return 0
    return services.mig_host_follow(host_id=host_id)
