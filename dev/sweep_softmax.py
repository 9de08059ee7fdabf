"""Tuning sweep of the split softmax (a lab tool, not a benchmark of record): per-call time in
a CUDA graph over rotating bf16 inputs, for the two-launch pair and the one-launch cluster
form (AOTINFER_SOFTMAX_KERNEL=split / split_cluster), at the chunk rule's size and pinned
chunk sizes (AOTINFER_SOFTMAX_SPLIT_CHUNK_KB), and what auto picks, with % of copy bandwidth.

    python dev/sweep_softmax.py [OUT.json [VARIANT ...]]   (GPU machine, provider installed)
    SWEEP_SHAPES=256x32000,384x32000 python dev/sweep_softmax.py out.json cluster regs

The JSON ({"us": {case: us}, "tokens": {}}) is what dev/ab_provider_builds.sh compares.
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import copy_bandwidth_bytes_per_s, rotation_graph_us, rotations  # noqa: E402

import aotinfer  # noqa: E402

SHAPES = [(b, 128256) for b in (32, 64, 96, 128, 192, 256, 512)] + [
    (b, 32000) for b in (128, 256, 384, 512, 1024)
]
# SWEEP_SHAPES="BxV,BxV,...": these shapes instead (e.g. grids of chosen CTA counts).
if os.environ.get("SWEEP_SHAPES"):
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in os.environ["SWEEP_SHAPES"].split(",")]
# label -> (AOTINFER_SOFTMAX_KERNEL, AOTINFER_SOFTMAX_SPLIT_CHUNK_KB or "" for the rule);
# cluster is the one-launch form's plain form, regs its register form.
VARIANTS = {
    "auto": ("auto", ""),
    "pair": ("split", ""),
    "cluster": ("split_cluster", ""),
    "regs": ("split_cluster_regs", ""),
    **{f"cluster{kb}": ("split_cluster", kb) for kb in ("8", "16", "32")},
}


def main():
    variants = {k: VARIANTS[k] for k in sys.argv[2:]} or VARIANTS
    copy_bw = copy_bandwidth_bytes_per_s()
    print(f"copy bandwidth {copy_bw / 1e12:.3f} TB/s")
    print("us per call in a graph (% of copy); bf16 logits in, fp32 probabilities out")
    print(f"{'shape':>12s} " + " ".join(f"{v:>15s}" for v in variants))
    results = {}
    for batch, vocab in SHAPES:
        useful = batch * vocab * (2 + 4)

        def make(i, batch=batch, vocab=vocab):
            g = torch.Generator(device="cuda").manual_seed(i)
            logits = torch.randn(batch, vocab, device="cuda", generator=g).to(torch.bfloat16)
            return (logits * 4, torch.rand(batch, device="cuda", generator=g) + 0.5)

        sets = rotations(make, useful)
        cells = []
        for label, (kernel, kb) in variants.items():
            os.environ["AOTINFER_SOFTMAX_KERNEL"] = kernel
            os.environ["AOTINFER_SOFTMAX_SPLIT_CHUNK_KB"] = kb
            us = rotation_graph_us(lambda lg, t: aotinfer.softmax(lg, t), sets)
            results[f"{label} {batch}x{vocab}"] = us
            cells.append(f"{us:7.1f} ({100 * useful / (us * 1e-6) / copy_bw:4.1f})")
        print(f"{batch:>5d}x{vocab:<6d} " + " ".join(f"{c:>15s}" for c in cells), flush=True)
        del sets
    for name in ("AOTINFER_SOFTMAX_KERNEL", "AOTINFER_SOFTMAX_SPLIT_CHUNK_KB"):
        os.environ.pop(name, None)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"copy_TB/s": copy_bw / 1e12, "us": results, "tokens": {}}, f, indent=1)


if __name__ == "__main__":
    main()
