"""A/B of the tensor-core decode's occupancy at head dim 128 (a lab tool): the default build
(2 CTAs per SM, the planner's WAVES = 2) against the 168-register build at 2 stages
(AOTINFER_DECODE_CTAS_PER_SM=3), planned with WAVES = 2 and with WAVES = 3, on the shapes of
the decode goals (uniform and skewed, bench_decode's inputs), each configuration timed
twice in alternation in one process.

    python dev/ab_decode_occupancy.py          (GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, batch_inputs  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _decode_plan  # noqa: E402

SHAPES = [(1, 1024), (16, 1024), (16, 4096), (16, 16384), (64, 4096), (64, 16384), (256, 1024)]
CONFIGS = {"2cta": ("", 2), "3cta_w2": ("3", 2), "3cta_w3": ("3", 3)}


def main():
    for batch, kv in SHAPES:
        for skewed in (False, True) if batch >= 5 else (False,):
            _, cache, indptr, indices, last, caches, q = batch_inputs(batch, kv, skewed)
            wrappers = {}
            for name, (_, waves) in CONFIGS.items():
                _decode_plan.WAVES = waves
                w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
                    torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD"
                )
                w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
                wrappers[name] = w
            _decode_plan.WAVES = 2
            ref = wrappers["2cta"].run(q, cache)
            res = {name: [] for name in CONFIGS}
            for _ in range(2):
                for name, (ctas, _) in CONFIGS.items():
                    os.environ["AOTINFER_DECODE_CTAS_PER_SM"] = ctas
                    w = wrappers[name]
                    out = w.run(q, cache)
                    err = (out.float() - ref.float()).abs().max().item()
                    assert err < 2e-2, f"{name}: max error {err} against the default"
                    res[name].append(rotation_graph_us(lambda c, w=w: w.run(q, c), caches))
            del os.environ["AOTINFER_DECODE_CTAS_PER_SM"]
            line = ", ".join(f"{k}: " + " / ".join(f"{v:.1f}" for v in vs) for k, vs in res.items())
            lens = "skewed" if skewed else "uniform"
            print(f"batch {batch:3d} kv {kv:5d} {lens:7s} (us, two rounds) {line}", flush=True)
            del caches, cache
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
