"""Ids the cloud hands back: a tag's value is only an id of the portal's if it parses as one."""

from __future__ import annotations

import uuid


def is_uuid(value: str) -> bool:
    """Whether ``value`` (a cloud tag's, which anyone with cloud access can write) is a UUID."""
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True
