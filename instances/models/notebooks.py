"""JupyterLab on a host, reached through the portal (instances/views/notebooks.py): one row
per notebook server the portal started for a host."""

from __future__ import annotations

import uuid

from django.db import models


class Notebook(models.Model):
    """A JupyterLab server on a host, started when someone who may act on the host asked for
    it and ended with the host (or on request). The portal reaches it at ``address`` with
    ``token``; nobody else is given either: people reach it through the portal's login."""

    class Status(models.TextChoices):
        STARTING = "starting", "Starting"
        RUNNING = "running", "Running"
        ENDED = "ended", "Ended"
        FAILED = "failed", "Failed"

    LIVE = frozenset({Status.STARTING, Status.RUNNING})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="notebooks"
    )
    started_by = models.ForeignKey(
        "portal.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING)
    reason = models.CharField(max_length=500, blank=True)
    # The server's own token and where it listens, for the portal's proxy only.
    token = models.CharField(max_length=64)
    address = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One live notebook server per host: asking again opens the same one.
            models.UniqueConstraint(
                fields=["instance"],
                condition=models.Q(status__in=["starting", "running"]),
                name="notebook_one_live_per_host",
            )
        ]

    def __str__(self) -> str:
        return f"notebook of {self.instance_id} ({self.status})"
