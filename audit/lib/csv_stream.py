"""CSV for StreamingHttpResponse: one line at a time, with spreadsheet formulas defused.

Text that starts like a formula (=, +, -, @, tab, carriage return) is prefixed with a quote so
a spreadsheet shows it instead of running it (OWASP "CSV injection"); numbers pass unchanged.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


class _Echo:
    """A file that hands back what csv.writer writes to it."""

    def write(self, value: str) -> str:
        return value


def csv_lines(rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """Each row as one CSV line, made safe to open in a spreadsheet."""
    writer = csv.writer(_Echo())
    for row in rows:
        yield writer.writerow([spreadsheet_safe(value) for value in row])
