"""Old code against new in one process (a helper of the dev/time_*.py lab tools that
reproduce what a change replaced): each pair's two callables timed in interleaved rounds,
the best round of each kept, so that a slow stretch of the host lands on both."""

from __future__ import annotations

import platform
import timeit
from typing import Callable, Dict, Optional, Tuple

import torch


def report(
    pairs: Dict[str, Tuple[Callable[[], object], Callable[[], object]]],
    what: str = "",
    out: Optional[str] = None,
    rounds: int = 7,
    number: int = 20000,
) -> str:
    """Times every (before, now) pair, prints one line per pair (CPU us per call) under a
    header naming the machine, torch and ``what``, writes the text to ``out`` when given and
    returns it."""
    best: Dict[Tuple[str, str], float] = {}
    for _ in range(rounds):
        for name, fns in pairs.items():
            for which, fn in zip(("before", "now"), fns):
                t = timeit.timeit(fn, number=number) / number * 1e6
                best[name, which] = min(best.get((name, which), 1e9), t)
    lines = [f"CPU us per call, best of {rounds} rounds of {number}{what} "
             f"({platform.processor() or 'cpu'}, torch {torch.__version__})"]  # fmt: skip
    for name in pairs:
        lines.append(f"{best[name, 'before']:6.2f} -> {best[name, 'now']:6.2f}  {name}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        with open(out, "w") as f:
            f.write(text)
    return text
