"""Writers of API tokens: issue, revoke, and the bearer check that reads them."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal import permissions
from portal.lib.errors import Forbidden
from portal.models import (
    ApiToken,
    User,
)

TOKEN_PREFIX = "gpp_"  # noqa: S105 - a public marker, like GitHub's ghp_


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def token_issue(*, user: User, name: str, days: int | None = None) -> tuple[ApiToken, str]:
    """Issue a token; return it with its secret, which is never stored and never shown again."""
    days = settings.PORTAL_TOKEN_DEFAULT_DAYS if days is None else days
    if not 1 <= days <= settings.PORTAL_TOKEN_MAX_DAYS:
        raise ValidationError(
            {"days": f"A token lives 1 to {settings.PORTAL_TOKEN_MAX_DAYS} days."},
            code="out_of_range",
        )
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Name the token, e.g. 'laptop' or 'CI'."}, code="required")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        digest=token_digest(secret),
        expires_at=timezone.now() + timedelta(days=days),
    )
    return token, secret


@transaction.atomic
def token_revoke(*, token: ApiToken, actor: User) -> ApiToken:
    if not permissions.can_revoke_token(actor, token):
        raise Forbidden("You can revoke only your own tokens.")
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token.refresh_from_db()
    return token


def token_authenticate(secret: str) -> ApiToken | None:
    """The live token for a secret, or None; records when it was last used (at most once a
    minute, so an API client in a loop does not turn every read into a write)."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(secret), revoked_at__isnull=True)
        .first()
    )
    now = timezone.now()
    if token is None or token.expires_at <= now or not token.user.is_active:
        return None
    if token.last_used_at is None or token.last_used_at < now - timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
