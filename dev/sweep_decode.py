"""Tuning sweep of the decode kernels (a lab tool, not a benchmark of record): CUDA-graph
time of the batch decode for a few shapes under each AOTINFER_DECODE_STAGES value and with
the CUDA-core kernel pinned, plus the host time of an eager run() and of plan(); then where
the time of the latency-bound cases goes: batch 1 (kv 1024) by split count, the merge kernel
alone, a one-kernel graph, and single decode by pipeline depth. Graph times are per call in
a graph of 10 calls (no launch latency; inputs not rotated, so small cases are L2-warm).

    python dev/sweep_decode.py            (on a GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import copy_bandwidth_bytes_per_s, graph_time_ms, host_us  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, paged_setup  # noqa: E402

import aotinfer  # noqa: E402

SHAPES = [(1, 1024), (16, 16384), (64, 4096), (256, 1024)]
SETTINGS = [
    ("stages=2", {"AOTINFER_DECODE_STAGES": "2"}),
    ("stages=3", {"AOTINFER_DECODE_STAGES": "3"}),
    ("stages=4", {"AOTINFER_DECODE_STAGES": "4"}),
    ("cuda_cores", {"AOTINFER_DECODE_KERNEL": "cuda_cores"}),
]


def main():
    bw = copy_bandwidth_bytes_per_s()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s")
    for batch, kv in SHAPES:
        g = torch.Generator().manual_seed(batch * 7 + kv)
        lens = [kv] * batch
        cache, indptr, indices, last = paged_setup(lens, g)
        q = torch.randn(batch, HQ, D, dtype=DT, device="cuda")
        nbytes = sum(lens) * HKV * D * 4 + 2 * q.numel() * 2
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD"
        )
        plan_us = []
        for _ in range(10):  # the first plan pays one-time costs; report the best of 10
            t = time.perf_counter()
            w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
            plan_us.append((time.perf_counter() - t) * 1e6)
        plan_us = min(plan_us)
        out = torch.empty_like(q)

        def run(w=w, q=q, cache=cache, out=out):
            return w.run(q, cache, out=out)

        host = host_us(run, hold_gpu=True)  # enqueue cost only: the GPU is kept busy
        line = [f"batch {batch:3d} kv {kv:5d}: plan {plan_us:.0f} us, run host {host:.1f} us"]
        for name, env in SETTINGS:
            for k_, v_ in env.items():
                os.environ[k_] = v_
            us = 1e3 * graph_time_ms(run, calls=10)
            for k_ in env:
                del os.environ[k_]
            line.append(f"{name} {us:.1f} us ({nbytes / us / 1e6:.2f} TB/s)")
        print("; ".join(line), flush=True)
        del cache, run
        torch.cuda.empty_cache()


def breakdown():
    tiny = torch.zeros(1, device="cuda")
    print(
        f"graph of one tiny kernel: {1e3 * graph_time_ms(lambda: tiny.add_(1)):.1f} us, "
        f"per call of 10: {1e3 * graph_time_ms(lambda: tiny.add_(1), calls=10):.1f} us"
    )
    g = torch.Generator().manual_seed(5)
    cache, indptr, indices, last = paged_setup([1024], g)
    q = torch.randn(1, HQ, D, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    line = ["batch 1 kv 1024 by fixed_split_size (pages of 16)"]
    for pages in (None, 4, 8, 16, 64):
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
        w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT,
               fixed_split_size=pages)  # fmt: skip
        us = 1e3 * graph_time_ms(lambda w=w: w.run(q, cache, out=out), calls=10)
        line.append(f"{pages}: {w._plan.split.max_splits} splits {us:.1f} us")
    print("; ".join(line), flush=True)
    for splits in (4, 16, 33):
        v = torch.randn(1, splits, HQ, D, device="cuda")
        s = torch.randn(1, splits, HQ, device="cuda")
        us = 1e3 * graph_time_ms(lambda v=v, s=s: aotinfer.merge_states(v, s), calls=10)
        print(f"merge_states alone, 1 x {splits} splits x {HQ} heads: {us:.1f} us", flush=True)
    for kv in (32768, 131072):
        k = torch.randn(kv, HKV, D, dtype=DT, device="cuda")
        v = torch.randn_like(k)
        q1 = torch.randn(HQ, D, dtype=DT, device="cuda")
        nbytes = 2 * k.numel() * 2
        line = [f"single decode kv {kv}"]
        for name, env in SETTINGS[:3]:
            os.environ.update(env)
            us = 1e3 * graph_time_ms(
                lambda q1=q1, k=k, v=v: aotinfer.single_decode_with_kv_cache(q1, k, v), calls=10
            )
            for k_ in env:
                del os.environ[k_]
            line.append(f"{name} {us:.1f} us ({nbytes / us / 1e6:.2f} TB/s)")
        print("; ".join(line), flush=True)
        del k, v


if __name__ == "__main__":
    main()
    breakdown()
