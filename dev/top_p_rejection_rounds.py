"""How many rounds a dual-pivot rejection top-p sampler (FlashInfer's algorithm: draw among
the probabilities above a lower bound, accept when the mass above the drawn one is below p,
else raise the bound to the drawn probability or to the midpoint between it and the upper
bound) takes on bench_sampling's rows, simulated on the CPU in float64 (a lab tool: the
evidence for or against a rejection top-p kernel, dev/NOTES.md "Next steps").

A round is a draw (an inverse-CDF pass over the row that may stop at the drawn element) and
a pass summing the masses above two pivots. A one-CTA-per-row kernel finishes a wave when
its slowest row does, so the table gives the mean and the maxima over groups of 132 and 264
rows (one and two CTAs per SM on an H200) as well as the share of rows needing 2, 3, 4+.

    python dev/top_p_rejection_rounds.py [ROWS] [TOP_P]     (CPU; default 1056 rows, 0.9)
"""

from __future__ import annotations

import sys

import torch


def bench_rows(rows: int, vocab: int, peaked: bool, seed: int) -> torch.Tensor:
    """bench_sampling.make_probs' distributions (flat: softmax of N(0, 1) logits; peaked:
    3 x N(0, 1) plus Gumbel noise), on the CPU."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, dtype=torch.float64)
    if peaked:
        u = torch.rand(rows, vocab, generator=g, dtype=torch.float64).clamp_min(1e-9)
        logits = logits * 3 - torch.log(-torch.log(u))
    return torch.softmax(logits, -1)


def rounds_of_row(p: torch.Tensor, top_p: float, g: torch.Generator) -> int:
    low, high, mass = 0.0, 1.0, 1.0
    for n in range(1, 64):
        kept = torch.where(p > low, p, torch.zeros_like(p))
        u = torch.rand((), generator=g, dtype=torch.float64).item() * mass
        drawn = min(int(torch.searchsorted(torch.cumsum(kept, 0), u)), p.numel() - 1)
        pivot0 = p[drawn].item()
        pivot1 = (pivot0 + high) / 2
        above0 = p[p > pivot0].sum().item()
        if above0 < top_p:
            return n
        above1 = p[p > pivot1].sum().item()
        if above1 < top_p:
            low, high, mass = pivot0, pivot1, above0
        else:
            low, mass = pivot1, above1
    raise RuntimeError("no acceptance in 63 rounds")


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1056
    top_p = float(sys.argv[2]) if len(sys.argv) > 2 else 0.9
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(7)
    print(f"top_p {top_p}, {rows} rows per case; rounds per row")
    print("case               mean   >=2    >=3    >=4   max/132 rows (mean)  max/264 rows (mean)")
    for vocab in (32000, 128256):
        for peaked in (False, True):
            probs = bench_rows(rows, vocab, peaked, seed=vocab + peaked)
            r = torch.tensor([rounds_of_row(row, top_p, g) for row in probs], dtype=torch.float64)
            share = [(r >= k).double().mean().item() for k in (2, 3, 4)]
            per = {w: r[: rows // w * w].view(-1, w).amax(1).mean().item() for w in (132, 264)}
            name = f"{vocab} {'peaked' if peaked else 'flat'}"
            print(
                f"{name:16s} {r.mean().item():6.3f} {share[0]:6.3f} {share[1]:6.3f} {share[2]:6.3f}"
                f"   {per[132]:6.2f}               {per[264]:6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
