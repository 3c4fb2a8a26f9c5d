"""Notices: messages for one user, closed when the world answers them or their reader does."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Notice(models.Model):
    """A message for one user in the portal (and by email): approvals, refusals, budgets."""

    user = models.ForeignKey("portal.User", on_delete=models.CASCADE, related_name="notices")
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    link = models.CharField(max_length=300, blank=True)
    # A button on the notice that answers it where it is read (Keep running on an idle warning):
    # a POST to a portal page, which checks permission and state as its own button does.
    action_label = models.CharField(max_length=40, blank=True)
    action_url = models.CharField(max_length=300, blank=True)
    # When the button stops making sense (an idle warning's stop time); none: it always does.
    action_until = models.DateTimeField(null=True, blank=True)
    # What the notice is about, e.g. "order:<id>:decide" or "budget:<project>:<month>": when
    # the world answers it (the order is decided, the month ends), notices_close(topic=...)
    # closes every notice of that topic. Empty: only its reader closes it (dismiss).
    topic = models.CharField(max_length=120, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user", "read_at"]),
            models.Index(fields=["user", "closed_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.subject}"

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    @property
    def action_open(self) -> bool:
        """Whether the notice shows its button: it is open, has one and its moment has not
        passed."""
        return (
            self.closed_at is None
            and bool(self.action_url)
            and (self.action_until is None or timezone.now() < self.action_until)
        )
