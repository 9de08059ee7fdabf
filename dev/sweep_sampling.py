"""Tuning sweep of the sampling kernels (a lab tool, not a benchmark of record): CUDA-graph
time of a few sampling calls with each kernel family pinned (AOTINFER_SAMPLING_KERNEL), and
the eager time of a batch-1 call (host included).

    python dev/sweep_sampling.py            (on a GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import graph_time_ms, time_ms  # noqa: E402

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


if __name__ == "__main__":
    main()
