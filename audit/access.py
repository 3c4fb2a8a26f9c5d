"""Who reads the whole audit log. audit sits below every app, so the answer comes from the
project's permissions module through a setting (AUDIT_LOG_READER, a dotted path to
callable(user) -> bool), the same device the apps use for every cross-app need."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string


def reads_whole_log(user) -> bool:
    """Everyone else reads only their own activity."""
    return bool(user is not None and import_string(settings.AUDIT_LOG_READER)(user))
