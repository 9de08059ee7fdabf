"""CPU simulation of the top-p window lab (24908d8, AOTINFER_LAB_TOPP_WINDOW; dev/NOTES.md
item 51): for bench_sampling's flat and peaked rows (128256, p = 0.9), how often the row's
level-0 crossing bin falls in the window that head_mass_window builds from the row's head,
and how long the list gets. Level-0 bins are key >> 21 (4 per octave); the window grows from
the head's crossing bin up and down while the head's counts scaled to the row stay within
half the list, split evenly between the two sides; no window where the head's crossing bin
alone is more than that. A row counts as a hit when its crossing bin is in the window and the
list (window keys after the head, plus the head's keys in the crossing bin) stays under 85%
of the capacity (the per-warp slices overflow before the whole list does).

    python3 dev/sim_topp_window.py [rows]
"""

from __future__ import annotations

import sys

import torch

VOCAB, P, BINS = 128256, 0.9, 2048


def bench_rows(peaked: bool, rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, VOCAB, generator=g)
    if peaked:
        u = torch.rand(rows, VOCAB, generator=g).clamp_min(1e-9)
        logits = logits * 3 - torch.log(-torch.log(u))
    return torch.softmax(logits, -1)


def histogram(probs: torch.Tensor):
    bins = (probs.view(torch.int32) >> 21).long()
    mass = torch.zeros(BINS, dtype=torch.float64).index_add_(0, bins, probs.double())
    ones = torch.ones_like(probs, dtype=torch.float64)
    count = torch.zeros(BINS, dtype=torch.float64).index_add_(0, bins, ones)
    return mass, count


def crossing(mass: torch.Tensor) -> int:
    at_or_above = mass.flip(0).cumsum(0).flip(0)
    return int((at_or_above >= P * mass.sum()).nonzero().max())


def window(head_count: torch.Tensor, bh: int, budget: float):
    """(lo, hi) of the window, or None (head_mass_window's rule)."""
    if head_count[bh] > budget:
        return None
    half = (budget - float(head_count[bh])) / 2
    ge = head_count.flip(0).cumsum(0).flip(0)  # head keys at or above each bin
    above = float(ge[bh + 1]) if bh + 1 < BINS else 0.0
    hi = bh
    def gt(b):  # head keys above bin b
        return float(ge[b + 1]) if b + 1 < BINS else 0.0

    while hi + 1 < BINS and above - gt(hi + 1) <= half:
        hi += 1
    lo = bh
    while lo - 1 >= 0 and float(ge[lo - 1]) - float(ge[bh]) <= half:
        lo -= 1
    return lo, hi


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    kernels = (
        (VOCAB // 8, "1024 threads, 1/8-row list"),
        (VOCAB // 32, "512 threads, 1/32-row list"),
    )
    for capacity, kernel in kernels:
        for peaked in (False, True):
            for head_share in (32, 16, 8):
                hits = overflows = none = 0
                longest = 0
                for r in bench_rows(peaked, rows, seed=1):
                    mass, count = histogram(r)
                    b = crossing(mass)
                    head = VOCAB // head_share
                    head_mass, head_count = histogram(r[:head])
                    budget = 0.5 * capacity * head / VOCAB
                    w = window(head_count, crossing(head_mass), budget)
                    if w is None:
                        none += 1
                        continue
                    lo, hi = w
                    rest = count[lo : hi + 1].sum() - head_count[lo : hi + 1].sum()
                    listed = float(rest + head_count[b])
                    longest = max(longest, int(listed))
                    overflow = listed > 0.85 * capacity
                    overflows += overflow
                    hits += lo <= b <= hi and not overflow
                dist = "peaked" if peaked else "flat"
                print(
                    f"{kernel}, {dist:6} rows, head 1/{head_share:<2}: crossing bin in the window "
                    f"{hits} of {rows}, no window {none}, overflow {overflows}, "
                    f"longest list {longest}"
                )


if __name__ == "__main__":
    main()
