"""Tuning sweep of the sampling kernels (a lab tool, not a benchmark of record): CUDA-graph
time of a few sampling calls with each kernel family pinned (AOTINFER_SAMPLING_KERNEL), and
the eager time of a batch-1 call (host included); then the one-CTA-per-row kernels at 1024
and at 512 threads per CTA (AOTINFER_SAMPLING_THREADS) over rotating inputs (only that part
with the argument `threads`).

    python dev/sweep_sampling.py            (on a GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import graph_time_ms, rotation_graph_us, time_ms  # noqa: E402

import aotinfer  # noqa: E402

S = dict(seed=1, offset=0)  # explicit seed: capturable without a generator
CALLS = {
    "top_k": lambda p: aotinfer.top_k_sampling_from_probs(p, 50, **S),
    "top_p": lambda p: aotinfer.top_p_sampling_from_probs(p, 0.9, **S),
    "min_p": lambda p: aotinfer.min_p_sampling_from_probs(p, 0.1, **S),
    "joint": lambda p: aotinfer.top_k_top_p_sampling_from_probs(
        p, 50, 0.9, filter_apply_order="joint", **S
    ),
    "plain": lambda p: aotinfer.sampling_from_probs(p, **S),
    "top_p_renorm": lambda p: aotinfer.top_p_renorm_probs(p, 0.9),
    "top_k_mask": lambda p: aotinfer.top_k_mask_logits(p, 50),
}


def main():
    if sys.argv[1:] == ["threads"]:
        threads_sweep()
        return
    for batch in (1, 128):
        probs = torch.softmax(torch.randn(batch, 128256, device="cuda"), -1)
        for name, fn in CALLS.items():
            line = [f"batch {batch:3d} {name:13s}"]
            for kernel in ("rowwise", "cluster"):
                os.environ["AOTINFER_SAMPLING_KERNEL"] = kernel
                g = 1e3 * graph_time_ms(lambda fn=fn, probs=probs: fn(probs), calls=10)
                e = 1e3 * time_ms(lambda fn=fn, probs=probs: fn(probs))
                line.append(f"{kernel} graph {g:7.1f} us eager {e:7.1f} us")
            del os.environ["AOTINFER_SAMPLING_KERNEL"]
            print("; ".join(line), flush=True)
    threads_sweep()


def threads_sweep():
    os.environ["AOTINFER_SAMPLING_KERNEL"] = "rowwise"
    for batch, vocab in ((1, 128256), (128, 32000), (128, 128256), (512, 128256)):
        count = max(2, (160 << 20) // (batch * vocab * 4))
        sets = [
            (torch.softmax(torch.randn(batch, vocab, device="cuda") * (3 if i % 2 else 1), -1),)
            for i in range(count)
        ]
        for name, fn in CALLS.items():
            line = []
            for threads in ("1024", "512"):
                os.environ["AOTINFER_SAMPLING_THREADS"] = threads
                line.append(f"{threads}: {rotation_graph_us(fn, sets):7.1f}")
            del os.environ["AOTINFER_SAMPLING_THREADS"]
            head = f"threads batch {batch:3d} vocab {vocab} {name:13s} "
            print(head + ", ".join(line), flush=True)
    del os.environ["AOTINFER_SAMPLING_KERNEL"]


if __name__ == "__main__":
    main()
