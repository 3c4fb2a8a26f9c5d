"""Typed readers for environment variables, used only by the settings (``portal/settings/``).

Every reader takes a sentence saying what the variable does (``help``, required) and records
the variable in ``SETTINGS``: its name, type, default, that sentence and the settings module
that read it. ``python manage.py settings_doc`` writes docs/settings.md from that registry, and
tests/portal/test_settings_doc.py fails when the file is stale. ``READ`` holds the names alone,
so the tests can compare what settings read with what ``docker-compose.yml`` and
``.env.example`` set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Setting:
    """One environment variable the settings read, as docs/settings.md shows it."""

    name: str
    kind: str  # str, bool, int, float or list
    default: str  # as the variable would be written ("" when empty), or doc_default's words
    help: str
    module: str  # the settings module that read it, e.g. portal.settings.base
    required: str = ""  # when it must be set (env_required), e.g. "when DJANGO_DEBUG=0"
    literal: bool = True  # False when default is doc_default's words rather than a value


SETTINGS: dict[str, Setting] = {}
READ: set[str] = set()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _caller_module() -> str:
    """The module that called a reader: the first frame outside this one."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


def _shown(default) -> str:
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def _record(name: str, kind: str, default, help: str, doc_default: str | None, required: str):
    if not help or not help.strip():
        raise ImproperlyConfigured(f"{name}: every setting needs help= saying what it does.")
    entry = Setting(
        name=name,
        kind=kind,
        default=doc_default if doc_default is not None else _shown(default),
        help=" ".join(help.split()),
        module=_caller_module(),
        required=required,
        literal=doc_default is None,
    )
    known = SETTINGS.get(name)
    # Settings are imported once per process; a second import (importlib.reload in a test)
    # records the same entries again. Two different reads of one variable are a mistake.
    if known is not None and (known.kind, known.default) != (entry.kind, entry.default):
        raise ImproperlyConfigured(
            f"{name} is read twice with different types or defaults ({known.module}, "
            f"{entry.module}); read it once and import the value."
        )
    SETTINGS.setdefault(name, entry)
    READ.add(name)


def _raw(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_str(name: str, default: str = "", *, help: str, doc_default: str | None = None) -> str:
    """Text. ``doc_default`` is what docs/settings.md shows when the default is computed (a
    path under the checkout, another variable's value)."""
    _record(name, "str", default, help, doc_default, "")
    return _raw(name, default)


def env_bool(name: str, default: bool, *, help: str, doc_default: str | None = None) -> bool:
    """1 or 0 (also true/false, yes/no, on/off); anything else refuses to start."""
    _record(name, "bool", default, help, doc_default, "")
    raw = _raw(name, "1" if default else "0").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be 1 or 0 (or true/false), not {raw!r}.")


def env_int(name: str, default: int, *, help: str, doc_default: str | None = None) -> int:
    _record(name, "int", default, help, doc_default, "")
    raw = _raw(name, str(default)).strip()
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}.") from None


def env_float(name: str, default: float, *, help: str, doc_default: str | None = None) -> float:
    """For rates and durations; never for money."""
    _record(name, "float", default, help, doc_default, "")
    raw = _raw(name, str(default)).strip()
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}.") from None


def env_list(
    name: str, default: str = "", *, help: str, doc_default: str | None = None
) -> list[str]:
    """Comma-separated values; blanks are dropped."""
    _record(name, "list", default, help, doc_default, "")
    return [item.strip() for item in _raw(name, default).split(",") if item.strip()]


def env_required(name: str, *, when: str, help: str, fallback: str | None = None) -> str:
    """Text that must be set ``when`` says (e.g. in production): unset or empty, the portal
    refuses to start and names it, unless a ``fallback`` is given (development's stand-in)."""
    _record(name, "str", "", help, None, when)
    value = _raw(name, "")
    if value:
        return value
    if fallback is not None:
        return fallback
    raise ImproperlyConfigured(f"{name} is not set; it is required {when}.")
