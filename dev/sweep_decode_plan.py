"""Lab sweep of the batch-decode work-list planner (aotinfer._decode_plan.plan_work): for the
benchmark's uniform and skewed shapes (bench_decode.lengths), the CUDA-graph time per call of
the planner's own choice, of the requests x splits grid of CUDA-graph mode (plan_splits), and
of forced chunk sizes around the fair share of one round of resident CTAs, each with the cost
model's estimate, so the model can be checked against the card (a lab tool, not a benchmark
of record).

    python dev/sweep_decode_plan.py         (GPU machine, provider installed)
    python dev/sweep_decode_plan.py --shapes 1x1024,1x4096 --chunks 8,16,32 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, batch_inputs  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _decode_plan as dp  # noqa: E402

SHAPES = [(16, 1024), (16, 4096), (16, 16384), (64, 1024), (64, 4096), (64, 16384), (256, 1024)]
FACTORS = [0.25, 0.5, 0.75, 1.0, 1.5, 2.0]


def estimate(pages, chunk, units, slots):
    return dp._estimated_time(Counter(pages.tolist()), chunk, units, slots, PAGE, 1 << 30)


def sweep_shape(batch, kv, skewed, real, slots, chunks=None, repeat=1):
    lens, cache, indptr, indices, last, caches, q = batch_inputs(batch, kv, skewed)
    pages = torch.tensor([-(-n // PAGE) for n in lens])
    fair = -(-int(pages.sum()) * HKV // slots)
    if chunks is None:
        chunks = sorted({max(8, int(fair * f)) for f in FACTORS} | {int(pages.max())})
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")

    def timed(plan_fn):
        dp.plan_work = plan_fn
        try:
            w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        finally:
            dp.plan_work = real
        return rotation_graph_us(lambda c: w.run(q, c), caches), w._plan.split

    def grid(pages_, **k):
        return dp.plan_splits(
            batch=pages_.numel(),
            max_pages=int(pages_.max()),
            total_pages=int(pages_.sum()),
            page_size=k["page_size"],
            num_kv_heads=k["num_kv_heads"],
            num_sms=k["num_sms"],
            max_splits_allowed=k["max_splits_allowed"],
        )

    name = f"{batch}x{kv} {'skewed' if skewed else 'uniform'}"
    for _ in range(repeat):
        us, sp = timed(real)
        print(f"{name}: planner {us:.1f} us (chunk {sp.chunk_pages}, splits {sp.max_splits})")
        us, sp = timed(grid)
        print(f"{name}: grid    {us:.1f} us (chunk {sp.chunk_pages}, splits {sp.max_splits})")
        for c in chunks:
            us, sp = timed(lambda p_, c=c, **k: real(p_, **dict(k, force_chunk=c)))
            est = estimate(pages, c, HKV, slots)
            print(
                f"{name}: chunk {c:5d} {us:.1f} us (splits {sp.max_splits}, "
                f"items {'-' if sp.work is None else sp.work.shape[0]}, model {est:.0f})"
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", help="BxKV[,BxKV...]; default: the benchmark's batches")
    parser.add_argument("--chunks", help="pages[,pages...]; default: multiples of the fair share")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    chunks = [int(c) for c in args.chunks.split(",")] if args.chunks else None
    real = dp.plan_work
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    slots = dp.WAVES * sms
    for batch, kv in shapes:
        for skewed in (False, True) if batch >= 5 else (False,):
            sweep_shape(batch, kv, skewed, real, slots, chunks, args.repeat)


if __name__ == "__main__":
    main()
