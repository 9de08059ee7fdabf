"""The per-call timer of the dev/time_*_cpu.py scripts: one warm-up call, then the best of a few
rounds, the round least disturbed by the rest of the host."""

from __future__ import annotations

import time


def best_seconds(f, n: int = 20000, rounds: int = 5) -> float:
    """Seconds per call of ``f()``: the fastest of ``rounds`` rounds of ``n`` calls each."""
    f()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n)
    return best
