"""What redaction costs: time per KB at 1 KB and at 1 MB (linear: totals ~1000x apart)."""

from __future__ import annotations

import time

KB = 1024
MB = 1024 * 1024
# The patterns are run over the whole text here (limit = its length), to show the engine is
# linear; what the portal calls reads only a bounded prefix (last figure).
INPUTS = {
    "one letter (issue 9's payload)": "a",
    "alternating classes": "aA1",
    "a secret pair, repeated": "password=hunter2 ",
    "log-like text with secrets": (
        "user ada signed in with token=gpp_abcdefghijklmnopqrstuvwx from 10.0.0.7; "
    ),
}


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _seconds_per_call(call, *, at_least: float = 0.5, reps: int = 1) -> float:
    """Median over runs of ``reps`` calls each, repeated for at least ``at_least`` seconds."""
    runs = []
    deadline = time.perf_counter() + at_least
    while time.perf_counter() < deadline or len(runs) < 3:
        started = time.perf_counter()
        for _ in range(reps):
            call()
        runs.append((time.perf_counter() - started) / reps)
    return sorted(runs)[len(runs) // 2]


def run(report) -> None:
    from audit.lib.redaction import clean_text, redact_text

    for name, unit in INPUTS.items():
        small, big = _fill(unit, KB), _fill(unit, MB)
        at_kb = _seconds_per_call(lambda text=small: redact_text(text, limit=KB), reps=200)
        at_mb = _seconds_per_call(lambda text=big: redact_text(text, limit=MB))
        report(f"redaction, {name}: ms at 1 KB | at 1 MB", f"{at_kb * 1e3:.3f} | {at_mb * 1e3:.1f}")
        report(
            "  ... ms per KB at 1 KB | at 1 MB",
            f"{at_kb * 1e3:.4f} | {at_mb * 1e3 / KB:.4f}",
            f"ratio of totals {at_mb / at_kb:,.0f} (goal ~1,000: linear; not 10^6)",
        )
    letters = _fill("a", MB)
    bounded = _seconds_per_call(lambda: redact_text(letters), reps=5)
    report(
        "redact_text on 1 MB as the portal calls it",
        f"{bounded * 1e3:.2f} ms",
        "reads a bounded prefix (32 KiB) and says the rest was cut",
    )
    stored = _seconds_per_call(lambda: clean_text(letters, 512), reps=5)
    report("clean_text on 1 MB for a 512-character field", f"{stored * 1e3:.2f} ms", "reads 4 KiB")
