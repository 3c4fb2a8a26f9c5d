"""Typed readers for environment variables, used only by the settings (``portal/settings/``).

Every name read goes into ``READ``, so the tests can compare what settings read with what
``docker-compose.yml`` and ``.env.example`` set.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

READ: set[str] = set()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    READ.add(name)
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name, "1" if default else "0").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be 1 or 0 (or true/false), not {raw!r}.")


def env_int(name: str, default: int) -> int:
    raw = env_str(name, str(default)).strip()
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}.") from None


def env_float(name: str, default: float) -> float:
    """For rates and durations; never for money."""
    raw = env_str(name, str(default)).strip()
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}.") from None


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_required(name: str, *, when: str) -> str:
    value = env_str(name)
    if not value:
        raise ImproperlyConfigured(f"{name} is not set; it is required {when}.")
    return value
