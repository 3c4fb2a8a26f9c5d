"""The simulated cloud's faults (latency, lost replies, throttling, ignored client tokens), set by
environment and rolled deterministically."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def unit_hash(*parts: object) -> float:
    """A stable number in [0, 1) from the parts (Python's hash() is salted per process)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Faults:
    """How the simulated cloud misbehaves, the ways EC2 (or a network in front of it) does.

    All off by default. ``reply_latency`` delays every host call's answer *after* the cloud
    acted, so a worker can die between "the cloud launched it" and "the row recorded it". A
    lost reply is a launch, stop, start or terminate that takes effect and then times out (a
    transient error). With ``ignore_client_tokens`` every launch makes a new host, as moto does.
    A throttling burst refuses ``throttle_burst_calls`` calls in a row with RequestLimitExceeded
    before they do anything.
    """

    reply_latency: float = 0.0
    lost_reply_rate: float = 0.0
    ignore_client_tokens: bool = False
    throttle_rate: float = 0.0
    throttle_burst_calls: int = 5

    @classmethod
    def from_settings(cls) -> Faults:
        faults = cls(
            reply_latency=settings.PORTAL_SIMULATED_REPLY_LATENCY_SECONDS,
            lost_reply_rate=settings.PORTAL_SIMULATED_LOST_REPLY_RATE,
            ignore_client_tokens=settings.PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS,
            throttle_rate=settings.PORTAL_SIMULATED_THROTTLE_RATE,
            throttle_burst_calls=settings.PORTAL_SIMULATED_THROTTLE_BURST_CALLS,
        )
        for name, value in (
            ("PORTAL_SIMULATED_LOST_REPLY_RATE", faults.lost_reply_rate),
            ("PORTAL_SIMULATED_THROTTLE_RATE", faults.throttle_rate),
        ):
            if not 0 <= value <= 1:
                raise ImproperlyConfigured(f"{name} is a chance between 0 and 1, not {value}.")
        if faults.reply_latency < 0:
            raise ImproperlyConfigured("PORTAL_SIMULATED_REPLY_LATENCY_SECONDS cannot be negative.")
        if faults.throttle_burst_calls < 1:
            raise ImproperlyConfigured("PORTAL_SIMULATED_THROTTLE_BURST_CALLS must be at least 1.")
        return faults

    @property
    def rolled(self) -> bool:
        """Whether any fault needs the dice (latency and tokens do not)."""
        return bool(self.lost_reply_rate or self.throttle_rate)


class FaultDice:
    """Which host call of this process meets which fault.

    One per process, not per provider object: a task builds a new provider each run, and a
    throttling burst must outlast one task as it outlasts one caller on EC2. The n-th call of
    a process draws the n-th numbers of the seed, so a process repeats its faults when seeded.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.calls = 0
            self.burst_left = 0

    def roll(self, seed: int, faults: Faults) -> tuple[bool, bool]:
        """(throttled, reply lost) for the next call."""
        with self._lock:
            n = self.calls
            self.calls += 1
            if self.burst_left:
                self.burst_left -= 1
                throttled = True
            else:
                throttled = unit_hash(seed, "throttle", n) < faults.throttle_rate
                if throttled:
                    self.burst_left = faults.throttle_burst_calls - 1
        return throttled, unit_hash(seed, "lost-reply", n) < faults.lost_reply_rate


FAULT_DICE = FaultDice()
