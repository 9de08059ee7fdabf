"""softmax(logits / temperature), bf16 logits in, fp32 probabilities out: aotinfer against
plain torch and FlashInfer (when importable), in one run, with the card's copy bandwidth.

    python benchmarks/bench_softmax.py [--quick]
"""

from __future__ import annotations

import argparse
import os

import torch
from bench_common import (
    copy_bandwidth_bytes_per_s,
    environment,
    rotation_graph_us,
    rotations,
    time_ms,
    try_import_flashinfer,
    write_results,
)

import aotinfer

# Column suffix -> environment: each kernel pinned (AOTINFER_SOFTMAX_KERNEL), the split pair
# also at four chunk sizes in KB (AOTINFER_SOFTMAX_SPLIT_CHUNK_KB).
_PIN_ENV = ("AOTINFER_SOFTMAX_KERNEL", "AOTINFER_SOFTMAX_SPLIT_CHUNK_KB")
VARIANTS = {
    "rowwise": {"AOTINFER_SOFTMAX_KERNEL": "rowwise"},
    "cluster": {"AOTINFER_SOFTMAX_KERNEL": "cluster"},
    "split": {"AOTINFER_SOFTMAX_KERNEL": "split"},
    "split_cluster": {"AOTINFER_SOFTMAX_KERNEL": "split_cluster"},
    **{
        f"split{kb}": {"AOTINFER_SOFTMAX_KERNEL": "split", "AOTINFER_SOFTMAX_SPLIT_CHUNK_KB": kb}
        for kb in ("4", "8", "16", "32")
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    copy_bw = copy_bandwidth_bytes_per_s()
    fi = try_import_flashinfer()
    batches = [1, 128] if args.quick else [1, 16, 128, 512]
    rows = []
    for vocab in (32000, 128256):
        for batch in batches:
            useful = batch * vocab * (2 + 4)  # bf16 read once, fp32 written once

            def make(i, batch=batch, vocab=vocab):
                g = torch.Generator(device="cuda").manual_seed(i)
                logits = torch.randn(batch, vocab, device="cuda", generator=g).to(torch.bfloat16)
                return (logits * 4, torch.rand(batch, device="cuda", generator=g) + 0.5)

            sets = rotations(make, useful)
            row = {"batch": batch, "vocab": vocab}
            row["aotinfer_us"] = 1e3 * time_ms(
                lambda lg, t: aotinfer.softmax(lg, t), args_list=sets
            )
            row["torch_us"] = 1e3 * time_ms(
                lambda lg, t: torch.softmax(lg.float() / t[:, None], -1), args_list=sets
            )
            if fi is not None:
                row["flashinfer_us"] = 1e3 * time_ms(
                    lambda lg, t: fi.sampling.softmax(lg, t), args_list=sets
                )
                row["vs_flashinfer"] = row["flashinfer_us"] / row["aotinfer_us"]
            row["vs_torch"] = row["torch_us"] / row["aotinfer_us"]
            # Kernel time without host overhead: CUDA-graph replay of >= 10 calls over the
            # rotating inputs (per-call time), for each kernel variant.
            for variant, env in VARIANTS.items():
                os.environ.update(env)
                row[f"graph_{variant}_us"] = rotation_graph_us(
                    lambda lg, t: aotinfer.softmax(lg, t), sets
                )
                for name in _PIN_ENV:
                    os.environ.pop(name, None)
            row["graph_us"] = rotation_graph_us(lambda lg, t: aotinfer.softmax(lg, t), sets)
            row["torch_graph_us"] = rotation_graph_us(
                lambda lg, t: torch.softmax(lg.float() / t[:, None], -1), sets
            )
            if fi is not None:
                row["fi_graph_us"] = rotation_graph_us(
                    lambda lg, t: fi.sampling.softmax(lg, t), sets
                )
            row["GB/s"] = useful / (row["graph_us"] * 1e-6) / 1e9
            row["% copy bw"] = 100 * useful / (row["graph_us"] * 1e-6) / copy_bw
            rows.append(row)
    env = environment(copy_bw)
    cols = [
        "batch",
        "vocab",
        "aotinfer_us",
        "torch_us",
        "flashinfer_us",
        "vs_torch",
        "vs_flashinfer",
        "graph_us",
        *(f"graph_{variant}_us" for variant in VARIANTS),
        "torch_graph_us",
        "fi_graph_us",
        "GB/s",
        "% copy bw",
    ]
    write_results(
        "softmax",
        env,
        rows,
        cols,
        notes="*_us: median of CUDA-event timed eager calls (host time included) over rotating "
        "inputs; graph_*: per-call time in a CUDA graph of >= 10 calls over the rotating inputs "
        "(kernel time without launch latency; graph_rowwise/cluster/split/split_cluster pin one kernel, graph_splitN the split pair with N KB chunks). GB/s and % copy bw from graph_us. Bytes counted: bf16 logits read once + "
        "fp32 probs written once. vs_* = baseline time / aotinfer time (eager).",
    )


if __name__ == "__main__":
    main()
