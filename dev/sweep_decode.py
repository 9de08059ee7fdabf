"""Tuning sweep of the decode kernels (a lab tool, not a benchmark of record): CUDA-graph
time of the batch decode for a few shapes under each AOTINFER_DECODE_STAGES value and with
the CUDA-core kernel pinned, plus the host time of an eager run() and of plan().

    python dev/sweep_decode.py            (on a GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import copy_bandwidth_bytes_per_s, graph_time_ms  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, paged_setup  # noqa: E402

import aotinfer  # noqa: E402

SHAPES = [(1, 1024), (16, 16384), (64, 4096), (256, 1024)]
SETTINGS = [
    ("stages=2", {"AOTINFER_DECODE_STAGES": "2"}),
    ("stages=3", {"AOTINFER_DECODE_STAGES": "3"}),
    ("stages=4", {"AOTINFER_DECODE_STAGES": "4"}),
    ("cuda_cores", {"AOTINFER_DECODE_KERNEL": "cuda_cores"}),
]


def host_us(fn, n=300):
    """CPU time per call of fn with nothing waiting on the GPU (the GPU keeps up)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return dt * 1e6


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
        t = time.perf_counter()
        w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        plan_us = (time.perf_counter() - t) * 1e6
        out = torch.empty_like(q)

        def run(w=w, q=q, cache=cache, out=out):
            return w.run(q, cache, out=out)

        host = host_us(run)
        line = [f"batch {batch:3d} kv {kv:5d}: plan {plan_us:.0f} us, run host {host:.1f} us"]
        for name, env in SETTINGS:
            for k_, v_ in env.items():
                os.environ[k_] = v_
            us = 1e3 * graph_time_ms(run)
            for k_ in env:
                del os.environ[k_]
            line.append(f"{name} {us:.1f} us ({nbytes / us / 1e6:.2f} TB/s)")
        print("; ".join(line), flush=True)
        del cache, run
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
