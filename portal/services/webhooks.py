"""Writers of webhooks and their deliveries.

An event becomes one delivery row per webhook that hears it, in the transaction that made the
event (so a rolled-back change sends nothing), and a worker POSTs it once that commits. Each
attempt is made outside any transaction (a slow receiver holds no lock), claimed first by
moving the delivery's due time past the attempt's timeout: two workers never send one delivery
at the same moment, and a worker killed mid-attempt leaves it due again, so every event is
delivered at least once, with the same ``webhook-id`` each time.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

import httpx
from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.lib.webhooks import (
    UrlRefused,
    new_secret,
    secret_decrypt,
    secret_encrypt,
    signature,
    url_check,
)
from portal.models import Project, User, Webhook, WebhookAttempt, WebhookDelivery, WebhookEvent

DESCRIPTION_MAX = 200
DELIVER_TASK = "portal.tasks.deliver_webhook"
# How many due deliveries one pass hands to the workers; the next pass takes the rest.
DUE_PER_PASS = 500


def _url(url) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ValidationError({"url": "Give the URL to call, e.g. https://hooks.example.org/gpu."})
    try:
        url_check(url.strip())
    except UrlRefused as refusal:
        raise ValidationError({"url": ValidationError(str(refusal), code="url_refused")}) from None
    return url.strip()


def _events(events, allowed: frozenset[str]) -> list[str]:
    if not isinstance(events, (list, tuple)) or not events:
        raise ValidationError({"events": "Choose at least one event."}, code="required")
    unknown = [
        str(e)[:40] for e in events if not isinstance(e, str) or e not in WebhookEvent.values
    ]
    if unknown:
        raise ValidationError(
            {"events": f"Not an event: {', '.join(unknown[:5])}. See WebhookEvent's list."},
            code="invalid_choice",
        )
    refused = sorted(set(events) - allowed)
    if refused:
        raise Forbidden(
            f"You may not subscribe to {', '.join(refused[:5])}: finance hears budget events "
            "only; the project's managers and admins hear every event.",
            code="forbidden_event",
        )
    return sorted(set(events))


def _description(text) -> str:
    text = (text or "").strip() if isinstance(text, str) else None
    if text is None or len(text) > DESCRIPTION_MAX or "\x00" in text:
        raise ValidationError(
            {"description": f"Describe it in at most {DESCRIPTION_MAX} characters."}
        )
    return text


@transaction.atomic
def webhook_create(
    *, actor: User, project: Project, url: str, events: list[str], description: str = ""
) -> tuple[Webhook, str]:
    """Register an endpoint for ``project``; returns it with its signing secret, which the
    caller shows once (the portal keeps it only encrypted, to sign with)."""
    allowed = permissions.webhook_events_allowed(actor, project)
    if not allowed:
        raise Forbidden(f"Only {project.slug}'s managers, finance and admins register webhooks.")
    url, events, description = _url(url), _events(events, allowed), _description(description)
    # The project's row serialises creations, so the count below cannot be raced past.
    Project.objects.select_for_update().get(pk=project.pk)
    most = settings.PORTAL_WEBHOOKS_PER_PROJECT
    if Webhook.objects.filter(project=project).count() >= most:
        raise Conflict(
            f"{project.slug} has {most} webhooks, the most a project may have: delete one first.",
            code="too_many_webhooks",
        )
    secret = new_secret()
    webhook = Webhook.objects.create(
        project=project,
        url=url,
        events=events,
        description=description,
        secret_encrypted=secret_encrypt(secret),
        created_by=actor,
    )
    return webhook, secret


def _may_manage(actor: User, webhook: Webhook) -> None:
    if not permissions.can_manage_webhook(actor, webhook):
        raise Forbidden(f"Only {webhook.project.slug}'s managers and admins change this webhook.")


@transaction.atomic
def webhook_update(*, actor: User, webhook: Webhook, **changes) -> Webhook:
    """Change the URL, events, description or whether it is on; only what is given changes."""
    unknown = set(changes) - {"url", "events", "description", "is_active"}
    if unknown:
        raise ValidationError({name: "Not a webhook field." for name in sorted(unknown)})
    _may_manage(actor, webhook)
    row = Webhook.objects.select_for_update().get(pk=webhook.pk)
    if "url" in changes:
        row.url = _url(changes["url"])
    if "events" in changes:
        row.events = _events(
            changes["events"], permissions.webhook_events_allowed(actor, row.project)
        )
    if "description" in changes:
        row.description = _description(changes["description"])
    if "is_active" in changes:
        if not isinstance(changes["is_active"], bool):
            raise ValidationError({"is_active": "Give true or false."})
        row.is_active = changes["is_active"]
    row.save()
    return row


@transaction.atomic
def webhook_delete(*, actor: User, webhook: Webhook) -> None:
    """Remove the endpoint and its delivery history."""
    _may_manage(actor, webhook)
    Webhook.objects.filter(pk=webhook.pk).delete()


@transaction.atomic
def webhook_secret_rotate(*, actor: User, webhook: Webhook) -> tuple[Webhook, str]:
    """A new signing secret, returned once. The old one keeps signing beside it for
    PORTAL_WEBHOOK_SECRET_OVERLAP_HOURS, so the receiver can switch without missing a message."""
    _may_manage(actor, webhook)
    row = Webhook.objects.select_for_update().get(pk=webhook.pk)
    secret = new_secret()
    row.previous_secret_encrypted = row.secret_encrypted
    row.previous_until = timezone.now() + timedelta(
        hours=settings.PORTAL_WEBHOOK_SECRET_OVERLAP_HOURS
    )
    row.secret_encrypted = secret_encrypt(secret)
    row.save()
    return row, secret


def _send_on_commit(delivery_ids: list[int]) -> None:
    task = current_app.tasks[DELIVER_TASK]
    for pk in delivery_ids:
        # robust: a broker outage must not fail the change that made the event; the pass over
        # due deliveries sends what was not sent.
        transaction.on_commit(partial(task.delay, pk), robust=True)


def webhook_emit(*, project_id: int, event: str, data: dict | Callable[[], dict]) -> int:
    """One delivery for each of the project's webhooks that hears ``event``, sent once the
    caller's transaction commits. Returns how many. ``data`` is what the event is about, in
    JSON types (or a function making it, called only when some webhook hears the event); the
    message is ``{"type", "timestamp", "data"}``."""
    WebhookEvent(event)  # an event name this file does not know is a programming error
    hearing = [
        pk
        for pk, events in Webhook.objects.filter(project_id=project_id, is_active=True).values_list(
            "pk", "events"
        )
        if event in events
    ]
    if not hearing:
        return 0
    now = timezone.now()
    payload = {
        "type": event,
        "timestamp": now.isoformat(),
        "data": data() if callable(data) else data,
    }
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook_id=pk,
            message_id=f"msg_{uuid.uuid4().hex}",
            event=event,
            payload=payload,
            created_at=now,
            next_attempt_at=now,
        )
        for pk in hearing
    )
    _send_on_commit([delivery.pk for delivery in deliveries])
    return len(deliveries)


def _signing_secrets(webhook: Webhook, now: datetime) -> list[str]:
    found = [secret_decrypt(webhook.secret_encrypted)]
    if (
        webhook.previous_secret_encrypted
        and webhook.previous_until
        and now < webhook.previous_until
    ):
        found.append(secret_decrypt(webhook.previous_secret_encrypted))
    return [secret for secret in found if secret]


def _post(webhook: Webhook, delivery: WebhookDelivery, now: datetime) -> tuple[int | None, str]:
    """One POST of the delivery: (the answer's status or None, what went wrong or "")."""
    if not webhook.is_active:
        return None, "The webhook is turned off."
    try:
        url_check(webhook.url)
    except UrlRefused as refusal:
        return None, str(refusal)
    secrets_in_use = _signing_secrets(webhook, now)
    if not secrets_in_use:
        return None, "The signing secret cannot be read (PORTAL_WEBHOOK_KEY changed): rotate it."
    body = json.dumps(delivery.payload, separators=(",", ":"))
    headers = {
        "content-type": "application/json",
        "user-agent": "gpu-portal-webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature(
            secrets_in_use, message_id=delivery.message_id, at=now, body=body
        ),
    }
    try:
        response = httpx.post(
            webhook.url,
            content=body.encode(),
            headers=headers,
            timeout=settings.PORTAL_WEBHOOK_TIMEOUT_SECONDS,
            follow_redirects=False,
        )
    except httpx.HTTPError as error:
        return None, f"{type(error).__name__}: {error}"[:500]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    if 300 <= response.status_code < 400:
        return response.status_code, f"Answered {response.status_code}; redirects are not followed."
    return response.status_code, f"Answered {response.status_code}."


def webhook_deliver(*, delivery_id: int, trigger: str = "send") -> WebhookDelivery | None:
    """Make one attempt at a delivery that is due; None when it is not (already delivered,
    given up, taken by another worker, or not due yet)."""
    now = timezone.now()
    # Claim it: due now, and not again until this attempt has surely ended (its timeout, twice
    # over for a slow worker, and a little more).
    hold = now + timedelta(seconds=2 * settings.PORTAL_WEBHOOK_TIMEOUT_SECONDS + 5)
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id, status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=hold, attempts=F("attempts") + 1)
    if not claimed:
        return None
    delivery = WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)
    started = time.monotonic()
    status, error = _post(delivery.webhook, delivery, now)
    took = int((time.monotonic() - started) * 1000)
    with transaction.atomic():
        row = WebhookDelivery.objects.select_for_update().get(pk=delivery_id)
        WebhookAttempt.objects.create(
            delivery=row,
            at=now,
            response_status=status,
            error=error,
            milliseconds=took,
            trigger=trigger,
        )
        row.response_status, row.last_error = status, error
        retries = settings.PORTAL_WEBHOOK_RETRY_SECONDS
        if not error:
            row.status, row.delivered_at, row.next_attempt_at = (
                WebhookDelivery.Status.DELIVERED,
                timezone.now(),
                None,
            )
        elif row.attempts <= len(retries) and row.webhook.is_active:
            row.next_attempt_at = timezone.now() + timedelta(seconds=retries[row.attempts - 1])
        else:
            row.status, row.next_attempt_at = WebhookDelivery.Status.FAILED, None
        row.save()
    return row


def webhooks_deliver_due(*, now: datetime | None = None) -> int:
    """Hand the workers every delivery that is due: retries whose time came, and first
    attempts whose task was lost (a broker outage, a killed worker)."""
    now = now or timezone.now()
    due = list(
        WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:DUE_PER_PASS]
    )
    task = current_app.tasks[DELIVER_TASK]
    for pk in due:
        task.delay(pk, "retry")
    return len(due)


@transaction.atomic
def webhook_resend(*, actor: User, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again now, with the same message and webhook-id (a receiver that
    already has it can drop the repeat). A failed one gets a fresh round of retries."""
    _may_manage(actor, delivery.webhook)
    if not delivery.webhook.is_active:
        raise Conflict("Turn the webhook on before resending to it.", code="webhook_off")
    row = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
    row.status = WebhookDelivery.Status.PENDING
    row.attempts = 0
    row.next_attempt_at = timezone.now()
    row.save()
    task = current_app.tasks[DELIVER_TASK]
    transaction.on_commit(partial(task.delay, row.pk, "resend"), robust=True)
    return row
