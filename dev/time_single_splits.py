"""CUDA-graph times of single_decode_with_kv_cache with its split count forced (a lab tool,
not a benchmark of record): for each "heads/kv_heads/head_dim x kv" case, the planner's own
split ("auto") and each forced count, per call in a graph of >= 10 calls over rotating
caches (bench_common.rotation_graph_us).

    LAB_SPLITS="auto 4 7 8 16" python3 dev/time_single_splits.py 32/32/128x4096 ...   (GPU machine)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _decode_plan as dp  # noqa: E402
from aotinfer import decode  # noqa: E402

L2_BYTES = 50 << 20


def forced(splits: int):
    """A _single_split stand-in that cuts every request into ``splits`` 64-key-aligned chunks."""

    def split(kv_len, *_):
        per_split = -(-kv_len // splits)
        chunk = -(-per_split // 64) * 64
        return dp.SplitPlan(chunk_pages=chunk, max_splits=-(-kv_len // chunk))

    return split


def main() -> None:
    real = decode._single_split
    for case in sys.argv[1:]:
        heads, kv = case.split("x")
        hq, hkv, d = (int(x) for x in heads.split("/"))
        kv = int(kv)
        q = torch.randn(hq, d, dtype=torch.bfloat16, device="cuda")
        copies = max(2, -(-2 * L2_BYTES // (2 * kv * hkv * d * 2)))
        sets = [
            tuple(torch.randn(kv, hkv, d, dtype=torch.bfloat16, device="cuda") for _ in "kv")
            for _ in range(min(copies, 32))
        ]
        for s in os.environ.get("LAB_SPLITS", "auto").split():
            decode._single_split = real if s == "auto" else forced(int(s))
            try:
                plan = decode._single_split(kv, hkv, d, 132)
                us = rotation_graph_us(
                    lambda k, v, q=q: aotinfer.single_decode_with_kv_cache(q, k, v), sets
                )
            finally:
                decode._single_split = real
            print(
                f"{case} splits={s}: {us:.1f} us "
                f"({plan.max_splits} splits of {plan.chunk_pages} keys)"
            )


if __name__ == "__main__":
    main()
