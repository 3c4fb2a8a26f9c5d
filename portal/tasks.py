"""portal's tasks: webhook deliveries. Thin wrappers around services (docs/design.md rule 4);
retries are the delivery row's own schedule, not Celery's, so none waits in the broker past
its visibility timeout."""

from __future__ import annotations

from celery import shared_task

from portal.services.webhooks import webhook_deliver, webhooks_deliver_due


@shared_task(acks_late=True, task_reject_on_worker_lost=True)
def deliver_webhook(delivery_id: int, trigger: str = "send") -> str:
    """One attempt at one delivery; returns its status, or "not due"."""
    delivery = webhook_deliver(delivery_id=delivery_id, trigger=trigger)
    return delivery.status if delivery else "not due"


@shared_task(acks_late=True)
def deliver_due_webhooks() -> int:
    """Beat: send the deliveries whose (re)try is due; returns how many."""
    return webhooks_deliver_due()
