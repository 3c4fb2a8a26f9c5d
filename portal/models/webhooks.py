"""Webhooks: a project's HTTPS endpoints, the events each hears, and every delivery made to
them (Standard Webhooks: https://www.standardwebhooks.com/)."""

from __future__ import annotations

from django.db import models


class WebhookEvent(models.TextChoices):
    """The events a webhook can hear. Finance may subscribe to the budget ones only."""

    ORDER_PLACED = "order.placed", "Order placed"
    ORDER_HELD = "order.held", "Order held for approval"
    ORDER_APPROVED = "order.approved", "Order approved"
    ORDER_REJECTED = "order.rejected", "Order rejected"
    HOST_RUNNING = "host.running", "Host running"
    HOST_STOPPED = "host.stopped", "Host stopped"
    HOST_TERMINATED = "host.terminated", "Host terminated"
    HOST_FAILED = "host.failed", "Host failed"
    HOST_SPOT_WARNING = "host.spot_warning", "Spot interruption warning"
    HOST_INTERRUPTED = "host.interrupted", "Spot host interrupted"
    HOST_IDLE_WARNING = "host.idle_warning", "Idle stop warning"
    HOST_LEASE_WARNING = "host.lease_warning", "Lease ending warning"
    JOB_STARTING = "job.starting", "Job starting"
    JOB_RUNNING = "job.running", "Job running"
    JOB_RECOVERING = "job.recovering", "Job recovering"
    JOB_SUCCEEDED = "job.succeeded", "Job succeeded"
    JOB_FAILED = "job.failed", "Job failed"
    JOB_CANCELLED = "job.cancelled", "Job cancelled"
    BUDGET_THRESHOLD = "budget.threshold", "Budget threshold crossed"


BUDGET_EVENTS = frozenset({WebhookEvent.BUDGET_THRESHOLD})


class Webhook(models.Model):
    """One endpoint of a project's: where its chosen events are POSTed, signed with a secret
    the portal keeps encrypted (it must sign with it, so it cannot keep only a hash)."""

    project = models.ForeignKey("portal.Project", on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, help_text="WebhookEvent values, sorted, no repeats.")
    description = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(default=True)
    # Fernet tokens (portal/lib/webhooks.py), never the secret itself.
    secret_encrypted = models.TextField()
    # After a rotation the old secret signs too, until previous_until (Standard Webhooks lets a
    # receiver accept any of several signatures), so receivers can switch without a gap.
    previous_secret_encrypted = models.TextField(blank=True)
    previous_until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        "portal.User", on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "id"]

    def __str__(self) -> str:
        return f"{self.project}: {self.url}"


class WebhookDelivery(models.Model):
    """One event for one webhook: its message (id and body, the same on every attempt, so a
    receiver can drop a repeat) and where its delivery stands."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    # The webhook-id header: the same on every attempt and on a resend.
    message_id = models.CharField(max_length=40, unique=True)
    event = models.CharField(max_length=40, choices=WebhookEvent.choices)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # When the next attempt is due; a worker that takes the delivery moves it past the
    # attempt's timeout, so a worker killed mid-attempt leaves it due again, not lost.
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} {self.message_id} ({self.status})"


class WebhookAttempt(models.Model):
    """One POST of a delivery and what came back."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="tries")
    at = models.DateTimeField()
    response_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    milliseconds = models.PositiveIntegerField(default=0)
    # Who asked for it: the first send, a scheduled retry, or a person's resend.
    trigger = models.CharField(max_length=40)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at:%Y-%m-%d %H:%M:%S}: {self.response_status}"
