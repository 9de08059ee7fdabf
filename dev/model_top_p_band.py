"""The sample of lab AOTINFER_LAB_TOP_P_BAND (providers/csrc/sampling/top_p_band.cuh) on the CPU
(a lab tool, no GPU): for rows of softmax(s x randn) and the benchmark's peaked rows, whether
the sample tries a band, whether the band holds the row's top-p crossing, and how many keys
it lists. The kernel's steps in float64 (its float atomics sum in another order: a model of
the decision, not its bits).

    python dev/model_top_p_band.py [ROWS]   (rows per case, default 30)
"""

from __future__ import annotations

import sys

import torch

GROUPS, CHUNKS = 2048, 16  # kBandSampleGroups, kBandChunks
BINS, SHIFT = 2048, 18  # kBandBins, kBandBinShift
MARGINS = (0.06, 0.03, 0.015)  # band_margin(0 .. 2)
CAPACITY = 16032  # the 1024-thread row kernel's gather list at 128256 (vocab / 8)


def sample_band(probs: torch.Tensor, p: float):
    """(lo, hi) of the band the sample chooses, or None where it tries none."""
    n = probs.numel()
    keys = probs.view(torch.int32).to(torch.int64)
    groups = (n + 3) // 4
    s = torch.arange(GROUPS)  # CHUNKS runs of contiguous groups spread over the row
    first = s // (GROUPS // CHUNKS) * groups // CHUNKS + s % (GROUPS // CHUNKS)
    idx = (first[:, None] * 4 + torch.arange(4)).flatten()
    idx = idx[idx < n]
    taken = probs[idx] > 0
    sk, sv = keys[idx][taken], probs[idx][taken].double()
    top_bits = int(sk.max()) >> SHIFT
    b = top_bits - (sk >> SHIFT)
    sk, sv, b = sk[b < BINS], sv[b < BINS], b[b < BINS]  # keys deeper than the bins are left out
    count = torch.bincount(b, minlength=BINS).double().cumsum(0)
    mass = torch.zeros(BINS, dtype=torch.float64).index_add_(0, b, sv).cumsum(0)
    total, per = float(mass[-1]), n / (4 * GROUPS)
    if float(count[int((mass >= p * total).nonzero()[0])]) * per <= CAPACITY:
        return None  # a kept set the kept-set list may hold
    for m in MARGINS:
        if p + m >= 1:
            continue
        hi_bin = int((mass > (p - m) * total).nonzero()[0])
        lo_bin = int((mass >= (p + m) * total).nonzero()[0])
        listed = float(count[lo_bin]) - (float(count[hi_bin - 1]) if hi_bin > 0 else 0.0)
        if lo_bin < BINS - 1 and listed * per <= 0.75 * CAPACITY:
            return (top_bits - lo_bin) << SHIFT, (top_bits - hi_bin + 1) << SHIFT
    return None


def crossing_key(probs: torch.Tensor, p: float) -> int:
    s, _ = probs.double().sort(descending=True)
    c = s.cumsum(0)
    t = s[int((c < p * c[-1]).sum())].float()
    return int(t.view(torch.int32))


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    torch.manual_seed(0)
    vocab = 128256
    cases = {
        "flat s=0.5": lambda: torch.softmax(0.5 * torch.randn(vocab), -1),
        "flat s=1": lambda: torch.softmax(torch.randn(vocab), -1),
        "flat s=2": lambda: torch.softmax(2 * torch.randn(vocab), -1),
        "peaked": lambda: torch.softmax(
            3 * torch.randn(vocab) - torch.log(-torch.log(torch.rand(vocab).clamp_min(1e-9))), -1
        ),
    }
    for name, make in cases.items():
        for p in (0.5, 0.9, 0.99):
            tried = held = 0
            listed = []
            for _ in range(rows):
                probs = make()
                band = sample_band(probs, p)
                if band is None:
                    continue
                tried += 1
                lo, hi = band
                keys = probs.view(torch.int32).to(torch.int64)
                t = crossing_key(probs, p)
                above = float(probs[keys >= hi].double().sum())
                held += lo <= t < hi and above < p * float(probs.double().sum())
                listed.append(int(((keys >= lo) & (keys < hi)).sum()))
            span = f"{min(listed)}-{max(listed)}" if listed else "-"
            line = f"{name:11s} top_p {p}: tried {tried} of {rows}, held {held}, listed keys {span}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
