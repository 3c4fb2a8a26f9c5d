"""Personal API tokens: only a digest is stored."""

from __future__ import annotations

from django.db import models


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the secret is shown once."""

    user = models.ForeignKey("portal.User", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise it")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.user} token {self.prefix}… ({self.name})"
