"""How often a cluster's top-p rejection test could be decided from per-bin masses alone (a lab
tool, CPU; no device time): dev/NOTES.md item 92's idea (d). Each CTA would sum its keys'
exact masses into bins of the key's exponent and the top B mantissa bits and push them with
the draw's totals; after the drawn key's exchange every CTA would know the mass above both
pivots to within the pivot's own bin, and skip the test pass and its exchange where that
decides the round. Here, on bench_sampling's rows (flat and peaked, float64 masses, float32
keys), round 0 of the dual-pivot test is drawn as the kernel draws it (k0 from the whole row,
k1 the midpoint between k0 and the largest), and the share of rows whose round is decided by
the bins is printed per bin width, with the table's size (bins of probabilities in (0, 1]).

    python dev/model_cluster_test_bins.py [ROWS] [VOCAB] [TOP_P]   (default 2000 32000 0.9)
"""

from __future__ import annotations

import sys

import torch
from top_p_rejection_rounds import bench_rows


def keys(p: torch.Tensor) -> torch.Tensor:
    """The float32 bit patterns of the probabilities (what prob_key orders by)."""
    return p.float().view(torch.int32).long()


def bin_bounds(mass: torch.Tensor, above: torch.Tensor, bin_of_key: int, own: float):
    """(lo, hi) of the mass above a key from the bins: the bins above its own, and those plus
    the rest of its own bin (`own`: the key's own mass where the row holds it)."""
    lo = float(above[bin_of_key + 1]) if bin_of_key + 1 < mass.numel() else 0.0
    return lo, lo + float(mass[bin_of_key]) - own


def decided_share(p: torch.Tensor, top_p: float, mantissa_bits: int, g: torch.Generator) -> float:
    """The share of rows whose round 0 the bins decide: accepted (the bound above k0 is below
    the goal) or rejected with the floor known (above k0 at least the goal, and k1's side
    known too)."""
    shift = 23 - mantissa_bits
    decided = 0
    for row in p:
        k = keys(row)
        bins = k >> shift
        nbins = int(bins.max()) + 1
        mass = torch.zeros(nbins, dtype=torch.float64).index_add_(0, bins, row)
        above = mass.flip(0).cumsum(0).flip(0)  # above[b] = mass of bins >= b
        goal = top_p * float(row.sum())
        cdf = row.cumsum(0)
        u = torch.rand((), generator=g, dtype=torch.float64).item() * float(cdf[-1])
        j = min(int(torch.searchsorted(cdf, u)), row.numel() - 1)
        k0 = int(k[j])
        high = float(row.max())
        v1 = torch.tensor([(float(row[j].float()) + high) / 2], dtype=torch.float32)
        k1 = int(v1.view(torch.int32))
        lo0, hi0 = bin_bounds(mass, above, k0 >> shift, float(row[j]))
        lo1, hi1 = bin_bounds(mass, above, min(k1 >> shift, nbins - 1), 0.0)
        if hi0 < goal or (lo0 >= goal and (hi1 < goal or lo1 >= goal)):
            decided += 1
    return decided / p.shape[0]


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 32000
    top_p = float(sys.argv[3]) if len(sys.argv) > 3 else 0.9
    print(f"{rows} rows of {vocab}, top_p {top_p}: share of round-0 tests the bins decide")
    print("mantissa bits  bins in (0, 1]  table a CTA (8 B a bin)   flat    peaked")
    for bits in (0, 1, 2, 3):
        shares = []
        for peaked in (False, True):
            g = torch.Generator().manual_seed(7 + bits)
            shares.append(decided_share(bench_rows(rows, vocab, peaked, 11), top_p, bits, g))
        n = 127 << bits
        print(f"{bits:13d}  {n:14d}  {n * 8 / 1024:17.1f} KB   {shares[0]:6.3f}  {shares[1]:6.3f}")


if __name__ == "__main__":
    main()
