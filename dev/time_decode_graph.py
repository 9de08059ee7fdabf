"""CUDA-graph times of the decode shapes the goals of issue #5 name, for A/B runs (a lab tool,
not a benchmark of record): per call in a graph of at least 10 calls over rotating KV caches
(bench_decode's inputs and method), written as JSON {"us": {case: us}, "tokens": {case:
checksum}} for dev/compare_graph_times.py ("tokens" here is a checksum of the output; the
inputs are seeded per shape, so two builds agree unless they round differently, as a
different split or merge order does: compare the times).

    python3 dev/time_decode_graph.py OUT.json [case-prefix ...]   (GPU machine, provider installed)
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import graph_time_ms, rotation_graph_us  # noqa: E402
from bench_decode import (  # noqa: E402
    DT,
    FP8,
    HKV,
    HQ,
    PAGE,
    D,
    batch_inputs,
    fp8_batch_inputs,
    set_count,
)

import aotinfer  # noqa: E402

BATCH_CASES = [  # (batch, kv, skewed)
    (1, 1024, False),
    (1, 4096, False),
    (1, 16384, False),
    (16, 1024, False),
    (16, 1024, True),
    (16, 4096, False),
    (16, 4096, True),
    (16, 16384, False),
    (16, 16384, True),
    (64, 4096, False),
    (64, 4096, True),
    (64, 16384, True),
    (256, 1024, False),
    (256, 4096, False),
    (256, 4096, True),
]
# Other KV types and position modes, uniform lengths: fp8 KV (the tensor-core kernel's fp8 ring,
# decode_tc_kernel.cuh) and ROPE_LLAMA (the CUDA-core kernel, decode_kernel.cuh).
VARIANT_CASES = [  # (variant, batch, kv)
    ("fp8", 1, 1024),
    ("fp8", 16, 16384),
    ("fp8", 64, 4096),
    ("rope", 64, 4096),
]
SINGLE_KV = (32768, 131072)
MERGE_STATES = (8, 32)


def checksum(t: torch.Tensor) -> float:
    return round(float(t.double().sum()), 2)


def batch_case(batch, kv, skewed, us, sums, variant=None):
    """variant None: bench_decode's case; "fp8": the same cache in float8_e4m3fn; "rope":
    with ROPE_LLAMA."""
    name = f"batch {batch}x{kv} {'skewed' if skewed else 'uniform'}"
    kv_dtype, opts = DT, {}
    if variant == "fp8":
        kv_dtype = FP8
        cache, indptr, indices, last, caches, q = fp8_batch_inputs(batch, kv)
    else:
        _, cache, indptr, indices, last, caches, q = batch_inputs(batch, kv, skewed)
    if variant == "rope":
        opts = {"pos_encoding_mode": "ROPE_LLAMA"}
    if variant:
        name = f"{variant} {name}"
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD"
    )
    w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=kv_dtype, **opts)
    us[name] = rotation_graph_us(lambda c: w.run(q, c), caches)
    sums[name] = checksum(w.run(q, cache))


def single_case(kv, us, sums):
    name = f"single {kv}"
    torch.manual_seed(kv)
    q = torch.randn(HQ, D, dtype=DT, device="cuda")
    k = torch.randn(kv, HKV, D, dtype=DT, device="cuda")
    sets = [(k, torch.randn_like(k))]
    sets += [
        (torch.randn_like(k), torch.randn_like(k)) for _ in range(set_count(4 * k.numel()) - 1)
    ]
    us[name] = rotation_graph_us(lambda a, b: aotinfer.single_decode_with_kv_cache(q, a, b), sets)
    sums[name] = checksum(aotinfer.single_decode_with_kv_cache(q, *sets[0]))


def merge_case(states, us, sums):
    name = f"merge_states 1x{states}x{HQ}x{D}"
    torch.manual_seed(states)
    v = torch.randn(1, states, HQ, D, dtype=torch.float32, device="cuda")
    s = torch.randn(1, states, HQ, dtype=torch.float32, device="cuda") * 4
    us[name] = 1e3 * graph_time_ms(lambda: aotinfer.merge_states(v, s), calls=10)
    sums[name] = checksum(aotinfer.merge_states(v, s)[0])


def main():
    path, prefixes = sys.argv[1], sys.argv[2:]
    us, sums = {}, {}

    def wanted(name):
        return not prefixes or any(name.startswith(p) for p in prefixes)

    for batch, kv, skewed in BATCH_CASES:
        if wanted(f"batch {batch}x{kv}"):
            batch_case(batch, kv, skewed, us, sums)
            torch.cuda.empty_cache()
    for variant, batch, kv in VARIANT_CASES:
        if wanted(f"{variant} batch {batch}x{kv}"):
            batch_case(batch, kv, False, us, sums, variant)
            torch.cuda.empty_cache()
    for kv in SINGLE_KV:
        if wanted(f"single {kv}"):
            single_case(kv, us, sums)
            torch.cuda.empty_cache()
    for states in MERGE_STATES:
        if wanted("merge"):
            merge_case(states, us, sums)
    for name, t in us.items():
        print(f"{name:36s} {t:8.1f} us", flush=True)
    with open(path, "w") as f:
        json.dump({"us": us, "tokens": sums}, f, indent=1)


if __name__ == "__main__":
    main()
