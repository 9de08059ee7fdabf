"""Host time of the batch-decode work-list planner (a lab tool, any machine, no GPU):
_decode_plan.plan_work for bench_decode's batch-16 shapes and two uniform batches, with
AOTINFER_DECODE_WORK_RUNS=off and =auto in the same process (best of 30 calls each).

    PYTHONPATH=core python3 dev/time_plan_work.py
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_decode import PAGE, lengths  # noqa: E402

from aotinfer import _decode_plan as dp  # noqa: E402


def best_us(pages: torch.Tensor, calls: int = 30) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        dp.plan_work(
            pages, num_kv_heads=8, row_blocks=1, page_size=PAGE, num_sms=132, max_splits_allowed=64
        )
        times.append(time.perf_counter() - t0)
    return 1e6 * min(times)


def main():
    shapes = [(16, kv, skewed) for kv in (1024, 4096, 16384) for skewed in (False, True)]
    shapes += [(64, 4096, False), (256, 1024, False)]
    print(f"{'shape':24s} {'off us':>8s} {'auto us':>8s}  plan (auto)")
    for batch, kv, skewed in shapes:
        g = torch.Generator().manual_seed(batch * 7 + kv)
        pages = torch.tensor([-(-n // PAGE) for n in lengths(batch, kv, skewed, g)])
        us = {}
        for mode in ("off", "auto"):
            os.environ[dp.ENV_WORK_RUNS] = mode
            us[mode] = best_us(pages)
        kind = (
            "runs"
            if dp.plan_work(
                pages,
                num_kv_heads=8,
                row_blocks=1,
                page_size=PAGE,
                num_sms=132,
                max_splits_allowed=64,
            ).work.dim()
            == 3
            else "chunks"
        )
        name = f"{batch}x{kv} {'skewed' if skewed else 'uniform'}"
        print(f"{name:24s} {us['off']:8.0f} {us['auto']:8.0f}  {kind}")


if __name__ == "__main__":
    main()
