"""What the webhooks of a project hear of its orders, hosts and jobs: the event names and the
``data`` each message carries. portal's webhook_emit does the rest (a delivery per webhook that
hears the event, sent once the change commits)."""

from __future__ import annotations

from portal.models import WebhookEvent
from portal.services import webhook_emit

E = WebhookEvent
# A host's move into one of these is an event of the same name.
HOST_EVENTS = {
    "running": E.HOST_RUNNING,
    "stopped": E.HOST_STOPPED,
    "terminated": E.HOST_TERMINATED,
    "failed": E.HOST_FAILED,
    "interrupted": E.HOST_INTERRUPTED,
}
ORDER_EVENTS = {
    "placed": E.ORDER_PLACED,
    "pending_approval": E.ORDER_HELD,
    "approved": E.ORDER_APPROVED,
    "rejected": E.ORDER_REJECTED,
}
JOB_EVENTS = {
    "starting": E.JOB_STARTING,
    "running": E.JOB_RUNNING,
    "recovering": E.JOB_RECOVERING,
    "succeeded": E.JOB_SUCCEEDED,
    "failed": E.JOB_FAILED,
    "cancelled": E.JOB_CANCELLED,
}


def _when(value) -> str | None:
    return value.isoformat() if value else None


def order_data(order) -> dict:
    return {
        "order": {
            "id": str(order.pk),
            "project": order.project.slug,
            "requester": order.requester.username,
            "status": order.status,
            "instance_type": order.instance_type.name,
            "market": order.market,
            "count": order.count,
            # A pool's order is the pool's size, not hosts launched at once.
            "pool": {"id": str(order.pool_id), "name": order.pool.name} if order.pool_id else None,
            "lease_hours": order.lease_hours,
            "reason": order.approval_reason or order.decision_reason,
        }
    }


def host_data(instance) -> dict:
    return {
        "host": {
            "id": str(instance.pk),
            "order": str(instance.order_id),
            "project": instance.project.slug,
            "owner": instance.owner.username,
            "status": instance.status,
            "reason": instance.status_reason,
            "instance_type": instance.instance_type.name,
            "market": instance.market,
            "pool": str(instance.pool_id) if instance.pool_id else None,
            "spot_warning_at": _when(instance.spot_warning_at),
            "idle_stop_at": _when(instance.idle_stop_at),
            "lease_expires_at": _when(instance.lease_expires_at),
        }
    }


def job_data(job) -> dict:
    return {
        "job": {
            "id": str(job.pk),
            "name": job.name,
            "project": job.project.slug,
            "owner": job.owner.username,
            "status": job.status,
            "reason": job.status_reason,
            "recoveries": job.recoveries,
            "exit_code": job.exit_code,
        }
    }


def order_event(order, status: str) -> None:
    """An order was placed, held, approved or rejected (other moves are not events)."""
    if status in ORDER_EVENTS:
        webhook_emit(
            project_id=order.project_id, event=ORDER_EVENTS[status], data=lambda: order_data(order)
        )


def host_event(instance, event: str) -> None:
    """A host moved (HOST_EVENTS) or was warned (spot, idle, lease)."""
    webhook_emit(project_id=instance.project_id, event=event, data=lambda: host_data(instance))


def host_moved(instance, status: str) -> None:
    if status in HOST_EVENTS:
        host_event(instance, HOST_EVENTS[status])


def job_moved(job, status: str) -> None:
    if status in JOB_EVENTS:
        webhook_emit(
            project_id=job.project_id, event=JOB_EVENTS[status], data=lambda: job_data(job)
        )
