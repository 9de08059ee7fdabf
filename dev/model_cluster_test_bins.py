"""How often a cluster's top-p rejection test could be decided from per-bin masses alone (a lab
tool, CPU; no device time): dev/NOTES.md item 92's idea (d). Each CTA would sum its keys'
exact masses into bins of the key's exponent and the top B mantissa bits and push them with
the draw's totals; after the drawn key's exchange every CTA would know the mass above both
pivots to within the pivot's own bin, and skip the test pass and its exchange where that
decides the round. Here, on bench_sampling's rows (flat and peaked; the reference's
fixed-point masses and float32 keys), round 0 of the dual-pivot test is drawn as the kernel
draws it (k0 from the whole row, k1 the midpoint between k0 and the largest), and the share of
rows whose round is decided by the bins is printed per bin width, with the table's size (bins
of probabilities in (0, 1]).

    python dev/model_cluster_test_bins.py [ROWS] [VOCAB] [TOP_P]   (default 2000 32000 0.9)
"""

from __future__ import annotations

import sys

import torch
from top_p_rejection_rounds import bench_rows

from aotinfer.reference import sampling as ref


def bin_bounds(mass: torch.Tensor, above: torch.Tensor, bin_of_key: int, own: int):
    """(lo, hi) of the mass above a key from the bins: the bins above its own, and those plus
    the rest of its own bin (`own`: the key's own mass where the row holds it)."""
    lo = int(above[bin_of_key + 1]) if bin_of_key + 1 < mass.numel() else 0
    return lo, lo + int(mass[bin_of_key]) - own


def decided_share(p: torch.Tensor, top_p: float, mantissa_bits: int, g: torch.Generator) -> float:
    """The share of rows whose round 0 the bins decide: accepted (the bound above k0 is below
    the goal) or rejected with the floor known (above k0 at least the goal, and k1's side
    known too). Masses, goal and keys are the reference's integers (rejection_mass,
    mass_goal), so the bins' sums are the kernel's exact ones."""
    shift = 23 - mantissa_bits
    w = p.float()
    q = ref.rejection_mass(w)
    decided = 0
    for row, qs, k in zip(w, q, ref._weight_keys(w)):
        bins = k >> shift
        nbins = int(bins.max()) + 1
        mass = torch.zeros(nbins, dtype=torch.int64).index_add_(0, bins, qs)
        above = mass.flip(0).cumsum(0).flip(0)  # above[b] = mass of bins >= b
        prefix = qs.cumsum(0)
        total = int(prefix[-1])
        goal = ref.mass_goal(top_p, total)
        target = int(torch.randint(total, (), generator=g))
        j = int(torch.searchsorted(prefix, torch.tensor(target), right=True))
        k0 = int(k[j])
        v1 = (row[j] + row.max()) * 0.5  # float32, as the kernel's midpoint
        k1 = int(v1.view(torch.int32))
        lo0, hi0 = bin_bounds(mass, above, k0 >> shift, int(qs[j]))
        lo1, hi1 = bin_bounds(mass, above, min(k1 >> shift, nbins - 1), 0)
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
