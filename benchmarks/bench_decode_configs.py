"""Batch decode across model configurations: aotinfer's BatchDecodeWithPagedKVCacheWrapper
against FlashInfer's (with and without tensor cores) on the same paged caches, in one run,
with the card's copy bandwidth measured in the same run.

bench_decode.py holds the goals' shape (32 query / 8 KV heads, head dim 128, bf16, page 16,
NHD). This benchmark moves one axis at a time away from it, to the head counts, head dims,
page sizes, layout and soft cap of models users serve, so that a configuration where our
kernels fall behind FlashInfer shows up. It has no goal of its own; "vs FI best" is the faster
of FlashInfer's two kernels over ours (above 1: we are faster). Graph replay only (CUDA
graphs of at least 10 calls rotating over caches that overflow the L2, as bench_decode.py);
bytes counted: q + K + V + out. Pages in random order, fresh random values.

    python benchmarks/bench_decode_configs.py [--deadline-s S]
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_common import (
    copy_bandwidth_bytes_per_s,
    environment,
    rotation_graph_us,
    try_import_flashinfer,
    write_results,
)
from bench_decode import finish_row, paged_setup, set_count

import aotinfer

BASE = dict(hq=32, hkv=8, d=128, page=16, layout="NHD", soft_cap=None)
# (name, the axes that differ from BASE); the names say which model has the shape.
CONFIGS = [
    ("base (Llama-3-8B)", {}),
    ("Qwen2.5-7B 28/4", dict(hq=28, hkv=4)),
    ("Llama-3-70B 64/8", dict(hq=64, hkv=8)),
    ("MHA 32/32", dict(hkv=32)),
    ("TP shard 16/1", dict(hq=16, hkv=1)),
    ("Llama-3.2-1B d64", dict(d=64)),
    ("Gemma-7B 16/16 d256", dict(hq=16, hkv=16, d=256)),
    ("Gemma-3-12B 16/8 d256", dict(hq=16, hkv=8, d=256)),
    ("Gemma-2-9B 16/8 d256 cap 50", dict(hq=16, hkv=8, d=256, soft_cap=50.0)),
    ("page 1", dict(page=1)),
    ("page 64", dict(page=64)),
    ("HND", dict(layout="HND")),
]
SHAPES = [(1, 4096), (16, 1024), (64, 4096)]  # (batch, kv), uniform lengths
DT = torch.bfloat16


def plan_for(w, cfg, table):
    """w.plan() of a wrapper (ours or FlashInfer's) for cfg on the case's page table."""
    w.plan(
        *table,
        cfg["hq"],
        cfg["hkv"],
        cfg["d"],
        cfg["page"],
        logits_soft_cap=cfg["soft_cap"],
        q_data_type=DT,
        kv_data_type=DT,
    )


def timed_wrapper(mod, cfg, table, caches, q, **kw):
    """Graph microseconds of mod's wrapper (aotinfer or FlashInfer) planned for cfg."""
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    w = mod.BatchDecodeWithPagedKVCacheWrapper(ws, cfg["layout"], **kw)
    plan_for(w, cfg, table)
    return rotation_graph_us(lambda c: w.run(q, c), caches)


def case_inputs(cfg, batch, kv):
    """One case's inputs, seeded by its shape: (table, caches, q, bytes moved), ``caches``
    the cache and enough random copies (1-tuples) that a rotation overflows the L2."""
    g = torch.Generator().manual_seed(batch * 7 + kv)
    torch.manual_seed(batch * 7 + kv)
    lens = [kv] * batch
    cache, indptr, indices, last = paged_setup(
        lens, g, page=cfg["page"], hkv=cfg["hkv"], d=cfg["d"], layout=cfg["layout"]
    )
    caches = [(cache,)] + [(torch.randn_like(cache),) for _ in range(set_count(cache.nbytes) - 1)]
    q = torch.randn(batch, cfg["hq"], cfg["d"], dtype=DT, device="cuda")
    nbytes = batch * kv * cfg["hkv"] * cfg["d"] * 2 * 2 + 2 * q.nbytes
    return (indptr, indices, last), caches, q, nbytes


def bench_case(name, cfg, batch, kv, fi, copy_bw, rows):
    table, caches, q, nbytes = case_inputs(cfg, batch, kv)
    row = {"config": name, "batch": batch, "kv": kv}
    row.update({k: cfg[k] for k in ("hq", "hkv", "d", "page", "layout")})
    row["aotinfer_graph_us"] = timed_wrapper(aotinfer, cfg, table, caches, q)
    if fi is not None:
        for tc, key in ((True, "fi_tc_graph_us"), (False, "fi_graph_us")):
            try:
                row[key] = timed_wrapper(fi, cfg, table, caches, q, use_tensor_cores=tc)
            except Exception as exc:  # a configuration FlashInfer does not build or run
                row[key] = f"error: {type(exc).__name__}: {str(exc)[:80]}"
        fi_times = [row[k] for k in ("fi_tc_graph_us", "fi_graph_us") if isinstance(row[k], float)]
        if fi_times:
            row["vs FI best"] = min(fi_times) / row["aotinfer_graph_us"]
    finish_row(row, nbytes, copy_bw, rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=float("inf"),
        help="stop starting new configurations after this many seconds (the results so far "
        "are written after every configuration)",
    )
    args = parser.parse_args()
    start = time.monotonic()
    copy_bw = copy_bandwidth_bytes_per_s()
    fi = try_import_flashinfer()
    env = environment(copy_bw)
    cols = ["config", "hq", "hkv", "d", "page", "layout", "batch", "kv", "aotinfer_graph_us"]
    cols += ["fi_tc_graph_us", "fi_graph_us", "vs FI best", "TB/s", "% copy"]
    rows = []
    for name, axes in CONFIGS:
        if time.monotonic() - start > args.deadline_s:
            env["stopped"] = f"deadline of {args.deadline_s:.0f} s reached before {name!r}"
            break
        cfg = {**BASE, **axes}
        for batch, kv in SHAPES:
            bench_case(name, cfg, batch, kv, fi, copy_bw, rows)
            torch.cuda.empty_cache()
        write_results("decode-configs", env, rows, cols, notes=__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main()
