"""Kernel timeline inside CUDA-graph replays (a lab tool, GPU machine; Nsight Systems does not
run on the device machines): for dev/ncu_targets.py's BEHIND shapes, ours and FlashInfer's
wrappers, each captured as a graph of calls rotating over caches that overflow the L2 (as
bench_decode_configs times them), replayed under torch.profiler, whose CUDA activity records
hold each graph node's kernel with its own start and end. Per kernel name: how many ran, their
mean duration, and the mean gap from the previous kernel's end to its start (negative: it
started before the previous one ended, as a PDL launch may). Session 78 found the kernels of
ours and FlashInfer's equally long when each runs alone (history/ncu-behind-4cb6373-h100.txt)
while the graph times differ; this says where the difference sits.

    python3 dev/trace_graph_kernels.py [calls]      (GPU machine; default 20 calls a graph)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(__file__)


def kernel_events(trace: dict) -> list:
    """(name, start_us, duration_us) of every GPU kernel in a Chrome trace, by start."""
    events = [
        (e["name"], float(e["ts"]), float(e.get("dur", 0.0)))
        for e in trace.get("traceEvents", [])
        if e.get("cat") == "kernel" and e.get("ph") == "X"
    ]
    return sorted(events, key=lambda e: e[1])


def short_name(name: str) -> str:
    """A kernel's name without namespaces and template arguments."""
    head = name.split("(")[0].split("<")[0]
    return head.split()[-1].split("::")[-1] if head.strip() else name


def timeline_summary(events: list, skip: int = 0) -> dict:
    """Per short kernel name: {"count", "mean_us", "mean_gap_us"}, the gap measured from the
    end of the kernel before it (the first kernel, and the first ``skip``, are left out)."""
    acc = defaultdict(lambda: [0, 0.0, 0.0])
    for i in range(max(1, skip), len(events)):
        name, start, dur = events[i]
        _, prev_start, prev_dur = events[i - 1]
        a = acc[short_name(name)]
        a[0] += 1
        a[1] += dur
        a[2] += start - (prev_start + prev_dur)
    return {
        k: {"count": n, "mean_us": round(d / n, 2), "mean_gap_us": round(g / n, 2)}
        for k, (n, d, g) in acc.items()
    }


def traced(replay) -> list:
    """The kernel events of one replay() under torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return kernel_events(json.load(f))


def main() -> None:
    import torch

    sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
    sys.path.insert(0, HERE)
    from bench_common import try_import_flashinfer
    from bench_decode import DT, PAGE, paged_setup, set_count
    from ncu_targets import BEHIND, behind_wrappers

    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    fi = try_import_flashinfer()
    for hq, hkv, d, batch, kv in BEHIND:
        g = torch.Generator().manual_seed(batch * 7 + kv)
        cache, indptr, indices, last = paged_setup([kv] * batch, g, hkv=hkv, d=d)
        caches = [cache] + [
            torch.randn_like(cache) for _ in range(set_count(cache.numel() * 2) - 1)
        ]
        q = torch.randn(batch, hq, d, dtype=DT, device="cuda")
        for name, lib, kw in behind_wrappers(fi, hq // hkv):
            w = lib.BatchDecodeWithPagedKVCacheWrapper(
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", **kw
            )
            w.plan(indptr, indices, last, hq, hkv, d, PAGE, q_data_type=DT, kv_data_type=DT)
            w.run(q, cache)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(calls):
                    w.run(q, caches[i % len(caches)])
            graph.replay()  # out of idle clocks
            events = traced(graph.replay)
            kernels_per_call = max(1, len(events) // calls)
            print(
                f"{name} {hq}/{hkv} d{d} {batch}x{kv}: {len(events)} kernels in {calls} calls, "
                f"replay {(events[-1][1] + events[-1][2] - events[0][1]) / calls:.2f} us a call"
                if events
                else f"{name} {hq}/{hkv} d{d} {batch}x{kv}: no kernel events recorded"
            )
            for k, v in timeline_summary(events, skip=kernels_per_call).items():
                print(f"    {k}: {v}")
            del graph
        del caches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
