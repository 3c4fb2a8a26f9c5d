"""One order of the demo's script (demo/services/history.py plays them, present.py adds the
last)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass
class Session:
    """One order the script places: who, what, when, for how long and how it ends."""

    number: int
    start: datetime
    hours: float
    project: str
    user: str
    instance_type: str
    market: str
    count: int
    ending: str  # terminate, stop, lease, idle, interrupt; open: runs on past the history
    policy: str = ""

    @property
    def lease_hours(self) -> int:
        if self.ending == "lease":
            return max(1, round(self.hours))
        return min(72, max(8, int(self.hours) + 4))
