"""`manage.py settings_doc`: write docs/settings.md from the settings registry of portal/lib/env.py.

Every environment variable the settings read is recorded there with its type, default and
description (the readers' ``help=``), so the page is generated rather than kept by hand, and
tests/portal/test_settings_doc.py fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.lib import env

DOC = Path("docs") / "settings.md"
COMMAND = "DJANGO_DEBUG=1 python manage.py settings_doc"
# The settings modules in the order the page shows them; any other module follows, by name.
ORDER = ["base", "instances", "billing", "audit", "operations"]

INTRO = f"""\
# Settings

<!-- Generated from the readers in portal/lib/env.py: do not edit by hand. Change the
help= of a reader in portal/settings/ and run `{COMMAND}`;
tests/portal/test_settings_doc.py fails while this file is stale. -->

Every setting is an environment variable, read once at start by `portal/settings/` through the
typed readers of `portal/lib/env.py`. A development checkout needs none of them (`make run` sets
`DJANGO_DEBUG=1`); production (`DJANGO_DEBUG=0`, the default) must set `DJANGO_SECRET_KEY` and
`PORTAL_AUDIT_SIGNING_KEY`. `.env.example` lists the same variables with a line of advice each,
and [operations.md](operations.md) says how to run the portal in production. AWS credentials
are not settings: boto3 finds them the usual way (environment, profile or instance role).

Types: `bool` is 1 or 0 (true/false, yes/no and on/off work too), `int` a whole number, `float`
a number, `list` comma-separated values, `str` text. A malformed value stops the portal at start
with a message naming the variable. Paths shown under `var/` are under `PORTAL_VAR_DIR`, and
relative paths are relative to the checkout.
"""


def _module_key(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def _sections() -> list[tuple[str, list[env.Setting]]]:
    grouped: dict[str, list[env.Setting]] = {}
    for entry in env.SETTINGS.values():
        grouped.setdefault(entry.module, []).append(entry)
    known = {f"portal.settings.{name}": index for index, name in enumerate(ORDER)}
    modules = sorted(grouped, key=lambda name: (known.get(name, len(ORDER)), name))
    return [(module, grouped[module]) for module in modules]


def _summary(module: str) -> str:
    """The settings module's docstring, joined into one paragraph."""
    doc = importlib.import_module(module).__doc__ or ""
    return " ".join(doc.split())


def _default(entry: env.Setting) -> str:
    if entry.required:
        return f"required {entry.required}"
    if not entry.literal:
        return entry.default
    if entry.default == "":
        return "*empty*"
    shown = entry.default
    # Defaults computed from the checkout's location are shown relative to it, so the page is
    # the same on every machine.
    shown = shown.replace(str(settings.VAR_DIR), "var")
    shown = shown.replace(f"{settings.BASE_DIR}/", "").replace(str(settings.BASE_DIR), ".")
    return f"`{shown}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """docs/settings.md as the registry says it should read."""
    parts = [INTRO]
    for module, entries in _sections():
        path = module.replace(".", "/") + ".py"
        parts.append(f"\n## {_module_key(module)} (`{path}`)\n\n{_summary(module)}\n\n")
        parts.append("| variable | type | default | what it does |\n")
        parts.append("|---|---|---|---|\n")
        for entry in entries:
            parts.append(
                f"| `{entry.name}` | {entry.kind} | {_cell(_default(entry))} "
                f"| {_cell(entry.help)} |\n"
            )
    return "".join(parts)


class Command(BaseCommand):
    help = "Write docs/settings.md from the settings registry (portal/lib/env.py)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--check",
            action="store_true",
            help="write nothing; exit 1 when docs/settings.md is not what it would write",
        )
        parser.add_argument(
            "--output", default=None, help="where to write (default: docs/settings.md)"
        )

    def handle(self, *args, check: bool = False, output: str | None = None, **options) -> None:
        target = Path(output) if output else Path(settings.BASE_DIR) / DOC
        text = render()
        if check:
            if not target.exists() or target.read_text() != text:
                raise CommandError(f"{target} is stale: run `{COMMAND}`.")
            self.stdout.write(f"{target} is up to date ({len(env.SETTINGS)} settings).")
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.stdout.write(f"wrote {target} ({len(env.SETTINGS)} settings)")
