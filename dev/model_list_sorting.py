"""A model of cluster_local_top_k.cuh's list_top_k (a lab tool, any machine): the bitonic
sorting networks that find the k-th largest key of rank 0's list, lane by lane as the kernel
runs them (element i = lane + 32 r of a warp in register r; shuffles as reads of another
lane's register). Checks, on random, tied, sparse (mostly empty), ascending and descending
lists of 512, 1024 and 2048 keys (clusters of 4, 8 and 16), that warp 0 ends with the list's
64 largest keys in order and that element k - 1 is the k-th largest, for k in 1..64; so
element 0, lane 0's first register, is the list's largest key (the draws' unit: list_top_k's
`largest`, adopted from lab AOTINFER_LAB_LIST_LARGEST in session 57).

    python3 dev/model_list_sorting.py [TRIALS]
"""

from __future__ import annotations

import random
import sys

WARPS = 16  # kSliceThreads / 32


def step(a, length, j):
    """warp_bitonic_step; a: 32 lanes of [register 0, register 1]."""
    if j == 32:
        for lane in range(32):
            down = (lane & length) == 0
            hi, lo = max(a[lane]), min(a[lane])
            a[lane] = [hi, lo] if down else [lo, hi]
        return
    new = [x[:] for x in a]
    for r in range(2):
        for lane in range(32):
            i = lane + 32 * r
            other = a[lane ^ j][r]
            down = (i & length) == 0
            lower = (i & j) == 0
            new[lane][r] = max(a[lane][r], other) if down == lower else min(a[lane][r], other)
    a[:] = new


def merge(a):
    """warp_bitonic_merge."""
    j = 32
    while j > 0:
        step(a, 64, j)
        j >>= 1


def keep_larger(a, b):
    """warp_keep_larger_64; b: element index -> key."""
    for lane in range(32):
        for r in range(2):
            a[lane][r] = max(a[lane][r], b(63 - lane - 32 * r))
    merge(a)


def elems(a):
    return [a[e % 32][e // 32] for e in range(64)]


def run(keys, k, warps=WARPS):
    chunks = len(keys) // 64
    lists = min(chunks, warps)
    regs = {}
    for w in range(lists):
        a = None
        for c in range(w, chunks, lists):
            b = [[keys[c * 64 + lane], keys[c * 64 + 32 + lane]] for lane in range(32)]
            length = 2
            while length <= 64:
                j = length >> 1
                while j > 0:
                    step(b, length, j)
                    j >>= 1
                length <<= 1
            if a is None:
                a = b
            else:
                be = elems(b)
                keep_larger(a, be.__getitem__)
        regs[w] = a
    n = lists
    while n > 1:
        half = n // 2
        slots = {w - half: elems(regs[w]) for w in range(half, n)}
        for w in range(half):
            s = slots[w]
            keep_larger(regs[w], s.__getitem__)
        n = half
    top = elems(regs[0])
    return top[k - 1], top


def main(trials: int) -> None:
    rng = random.Random(1)
    for trial in range(trials):
        n = rng.choice([512, 1024, 2048])
        mode = rng.choice(["random", "ties", "sparse", "ascending", "descending"])
        if mode == "random":
            keys = [rng.getrandbits(31) for _ in range(n)]
        elif mode == "ties":
            keys = [rng.choice([0, 5, 7, 9, 1 << 30]) for _ in range(n)]
        elif mode == "sparse":
            keys = [rng.getrandbits(31) if rng.random() < 0.03 else 0 for _ in range(n)]
        else:
            keys = sorted((rng.getrandbits(31) for _ in range(n)), reverse=mode == "descending")
        k = rng.randint(1, 64)
        got, top = run(keys, k)
        want = sorted(keys, reverse=True)
        assert top == want[:64] and got == want[k - 1], (trial, n, mode, k)
        assert top[0] == max(keys), (trial, n, mode)
    print(f"{trials} lists: the 64 largest in order, the k-th and the largest, every time")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
