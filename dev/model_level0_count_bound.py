"""A lane-level Python model of providers/csrc/sampling/level0_count_bound.cuh's warp scan
(level0_count_bound, adopted in session 52, dev/NOTES.md item 84), checked on this CPU before any
GPU ran it: on random slices, the bound it returns (or "undecided") equals what radix_threshold's
level 0 returns with SearchTarget::enough (a descending scan of the 2048 level-0 bins, the early
exit where the crossing bin holds one key or fills k, then `enough`). The model walks the lanes'
runs of 64 bins in the kernel's rotated order and the crossing run's 32 pairs as the warp does.

A model, not the kernel: the GPU tests (tests/gpu/test_sampling.py) are the check that counts.
With --bench-rows (torch) it counts instead how many slices of bench_sampling's flat and peaked
rows level 0 leaves undecided, per vocabulary and cluster size (k = 50, 128 keys enough): the
evidence for bounding every slice this way (lab AOTINFER_LAB_SLICE_BOUND_ALL_SLICES, adopted in
session 53). Session 53 removed the rejected lab AOTINFER_LAB_LIST_KEY_IN_WARP and its model.

    python3 dev/model_level0_count_bound.py [TRIALS [SEED]]
    python3 dev/model_level0_count_bound.py --bench-rows
"""

import random
import struct
import sys

BINS, SHIFT = 2048, 21
UNDECIDED = "undecided"


def key_of(f):
    ok = f > 0 and f != float("inf")  # NaN compares false
    return struct.unpack("<I", struct.pack("<f", f))[0] if ok else 0


def level0_by_search(keys, k, enough):
    """radix_threshold's level 0 for a count search with `enough`."""
    if sum(1 for x in keys if x) < k:
        return 0
    counts = [0] * BINS
    for x in keys:
        if x:
            counts[x >> SHIFT] += 1
    above = 0
    for b in range(BINS - 1, -1, -1):
        if above + counts[b] >= k:
            c = counts[b]
            stops = c == 1 or above + c == k or above + c <= enough
            return b << SHIFT if stops else UNDECIDED
        above += counts[b]
    raise AssertionError("unreachable")


def level0_by_warp(keys, k, enough):
    """level0_count_bound's warp 0, lane by lane."""
    counts = [0] * BINS
    for x in keys:
        if x:
            counts[x >> SHIFT] += 1
    pairs = [(counts[2 * p], counts[2 * p + 1]) for p in range(BINS // 2)]
    run_bins, run_pairs = BINS // 32, BINS // 64
    own = []
    for lane in range(32):
        first = (BINS - run_bins * (lane + 1)) // 2
        own.append(sum(sum(pairs[first + (i + lane) % run_pairs]) for i in range(run_pairs)))
    through = [sum(own[: lane + 1]) for lane in range(32)]
    if through[-1] < k:
        return 0
    run = next(lane for lane in range(32) if through[lane] >= k)
    above_run = through[run] - own[run]
    lane_pairs = [pairs[(BINS - run_bins * run) // 2 - 1 - lane] for lane in range(32)]
    pair_through = [above_run + sum(sum(q) for q in lane_pairs[: lane + 1]) for lane in range(32)]
    at = next(lane for lane in range(32) if pair_through[lane] >= k)
    low, high = lane_pairs[at]
    pair = (BINS - run_bins * run) // 2 - 1 - at
    above, b, c = pair_through[at] - low - high, 2 * pair + 1, high
    if above + high < k:
        above, b, c = above + high, b - 1, low
    stops = c == 1 or above + c == k or above + c <= enough
    return b << SHIFT if stops else UNDECIDED


def random_slice(rng, trial):
    n = rng.choice([50, 120, 1000, 4000, 8000])
    scale = [1.0, 3.0, 8.0, 0.01][trial % 4]  # flat, peaked, sharp, nearly uniform
    logits = [rng.gauss(0.0, 1.0) * scale for _ in range(n)]
    top = max(logits)
    probs = [2.718281828459045 ** (v - top) for v in logits]
    if trial % 7 == 0:
        probs[::3] = [0.0] * len(probs[::3])
    if trial % 11 == 0:
        probs[n // 2] = float("nan")
    return [key_of(struct.unpack("<f", struct.pack("<f", p))[0]) for p in probs]


def bench_rows():
    import torch  # bench_sampling's make_probs, on the CPU

    g = torch.Generator().manual_seed(0)
    for vocab, ctas in ((32000, 8), (32000, 4), (128256, 16), (128256, 8), (128256, 4)):
        for peaked in (False, True):
            logits = torch.randn(4, vocab, generator=g)
            if peaked:
                u = torch.rand(4, vocab, generator=g).clamp_min(1e-9)
                logits = logits * 3 - torch.log(-torch.log(u))
            probs = torch.softmax(logits, -1)
            n = (vocab + ctas - 1) // ctas
            slices = [probs[r, s * n : (s + 1) * n].tolist() for r in range(4) for s in range(ctas)]
            bounds = [level0_by_search([key_of(x) for x in sl], 50, 128) for sl in slices]
            left = sum(b == UNDECIDED for b in bounds)
            kind = "peaked" if peaked else "flat"
            where = f"{vocab}, clusters of {ctas} ({n} keys a slice), {kind}"
            print(f"{where}: {left} of {len(bounds)} undecided")


def main():
    if sys.argv[1:] == ["--bench-rows"]:
        bench_rows()
        return
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 52)
    undecided = 0
    for trial in range(trials):
        keys = random_slice(rng, trial)
        k = rng.randint(1, 64)
        want, got = level0_by_search(keys, k, 128), level0_by_warp(keys, k, 128)
        assert want == got, (trial, k, want, got)
        undecided += want == UNDECIDED
    print(f"{trials} slices: the same bound or both undecided ({undecided} undecided)")


if __name__ == "__main__":
    main()
