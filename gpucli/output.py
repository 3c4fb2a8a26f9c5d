"""What gpu prints: tables for people, JSON for scripts (``--json``: only JSON on stdout,
everything else on stderr), UTC times, durations, and the wait spinner (on a terminal only)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print only JSON on stdout (the API's own fields).")
]


class Choice(StrEnum):
    """A value from a fixed list (typer offers them in --help and completion)."""


def choices(name: str, values: Sequence[str]) -> type[Choice]:
    return Choice(name, {value: value for value in values})


out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    # Plain print, not rich: a pipe gets exactly the JSON, no colour codes or wrapping.
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """Progress and remarks: stderr, so stdout stays the answer."""
    typer.echo(message, err=True)


def when(value: str | None) -> str:
    """An API time (ISO 8601) as UTC minutes: 2026-11-17 10:00Z."""
    if not value:
        return "-"
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str) -> None:
    if not rows:
        note(empty)
        return
    grid = Table(*columns, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        grid.add_row(*("-" if cell in (None, "") else str(cell) for cell in row))
    out.print(grid)


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """One object as name: value lines."""
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        shown = "-" if value in (None, "", []) else value
        out.print(f"{name.ljust(width)}  {shown}", markup=False)


DURATION = re.compile(r"^\s*(\d+)\s*([hd]?)\s*$", re.IGNORECASE)


def hours(text: str) -> int:
    """'8h', '8' or '2d' as whole hours (leases and extensions are counted in hours)."""
    match = DURATION.match(text)
    if not match or int(match.group(1)) < 1:
        raise typer.BadParameter(f"{text!r} is not a number of hours or days, such as 8h or 2d.")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * 24 if unit == "d" else number


@contextlib.contextmanager
def waiting(message: str) -> Iterator[Any]:
    """A spinner on stderr while gpu waits, when stderr is a terminal; nothing on a pipe. The
    object it gives has ``update(text)``."""
    if err.is_terminal:
        with err.status(message) as status:
            yield status
    else:
        yield _Silent()


class _Silent:
    def update(self, *args: Any, **kwargs: Any) -> None:
        pass
