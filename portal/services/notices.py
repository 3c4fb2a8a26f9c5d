"""Writers of notices: send, mark read, close when the world has answered, dismiss."""

from __future__ import annotations

from datetime import datetime

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from portal.lib.errors import Forbidden
from portal.models import (
    Notice,
    User,
)


def notice_send(
    *,
    user: User,
    subject: str,
    body: str = "",
    link: str = "",
    action: tuple[str, str] | None = None,
    action_until: datetime | None = None,
    topic: str = "",
) -> Notice:
    """A notice in the portal, and an email once the transaction commits. ``action`` is a
    (label, URL) button on the notice: the URL is a portal page answering a POST; it is shown
    until ``action_until`` (when given), after which pressing it could only be refused.
    ``topic`` names what the notice is about, so that ``notices_close`` closes it once the
    world has answered it."""
    label, url = action or ("", "")
    notice = Notice.objects.create(
        user=user,
        subject=subject[:200],
        body=body,
        link=link,
        action_label=label,
        action_url=url,
        action_until=action_until if action else None,
        topic=topic[:120],
    )
    if user.email:
        transaction.on_commit(
            lambda: send_mail(
                subject=f"[GPU Portal] {subject}",
                message=f"{body}\n\n{link}".strip(),
                from_email=None,
                recipient_list=[user.email],
                fail_silently=True,
            )
        )
    return notice


def notices_mark_read(*, user: User, notice_ids: list[int] | None = None) -> int:
    rows = Notice.objects.filter(user=user, read_at__isnull=True)
    if notice_ids is not None:
        rows = rows.filter(pk__in=notice_ids)
    return rows.update(read_at=timezone.now())


def notices_close(*, topic: str, reason: str, prefix: bool = False) -> int:
    """Close every open notice of ``topic`` (every topic starting with it, with ``prefix``):
    what it asked about has been answered. Closing twice is a no-op."""
    if not topic:
        return 0
    rows = Notice.objects.filter(closed_at__isnull=True)
    rows = rows.filter(topic__startswith=topic) if prefix else rows.filter(topic=topic)
    return rows.update(closed_at=timezone.now(), closed_reason=reason[:200])


@transaction.atomic
def notice_dismiss(*, user: User, notice: Notice) -> Notice:
    """Close one of my open notices by hand: I have read it and nothing is left to do."""
    if notice.user_id != user.pk:
        raise Forbidden("You can dismiss only your own notices.")
    row = Notice.objects.select_for_update().get(pk=notice.pk)
    if row.closed_at is None:
        row.closed_at = timezone.now()
        row.closed_reason = "Dismissed."
        row.read_at = row.read_at or row.closed_at
        row.save(update_fields=["closed_at", "closed_reason", "read_at"])
    return row


# --- API tokens ------------------------------------------------------------------------------
