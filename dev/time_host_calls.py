"""Host time of eager calls as JSON (a lab tool for dev/ab_provider_builds.sh, which compares
two provider builds): bench_sampling's batch-1 calls (dev/time_sampling_host.py), decode
run() at dev/time_decode_host.py's shapes with and without ``out``, the provider's decode
call on zero rows (parsing and checks, no launch), and torch-only controls (allocations
and an in-place add, the same code under both builds: they show how far the host itself
drifted between the processes). GPU held busy, so every call only enqueues; each figure is
the median of three interleaved rounds of 200 calls (bench_common.busy_host_us).

    python dev/time_host_calls.py OUT.json      (GPU machine, provider installed)
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import busy_host_us, warm_up_host  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from time_decode_host import (  # noqa: E402
    SHAPES,
    planned_shape,
    planned_wrapper,
    recorded_provider_args,
    zero_row_args,
)
from time_sampling_host import bench_calls  # noqa: E402


def decode_parts(dev, ws) -> dict:
    parts, keep = {}, []
    for batch, kv in SHAPES:
        w, q, out, cache, table = planned_shape(batch, kv, dev, ws)
        full = planned_wrapper(ws, table, prepared=False)  # run() makes the full call
        args0 = zero_row_args(recorded_provider_args(full, q, cache))
        k, p = w._plan.kernels, w._plan
        name = f"decode {batch}x{kv}"
        parts[f"{name} run"] = lambda w=w, q=q, c=cache: w.run(q, c)
        parts[f"{name} run out="] = lambda w=w, q=q, c=cache, o=out: w.run(q, c, out=o)
        parts[f"{name} run, full call"] = lambda w=full, q=q, c=cache: w.run(q, c)
        parts[f"{name} provider, zero rows"] = lambda k=k, a=args0: k.batch_decode(*a)
        shape, dtype = p.q_shape, p.o_dtype
        parts[f"control {name} torch.empty(*shape)"] = lambda s=shape, t=dtype: torch.empty(
            *s, dtype=t, device=dev
        )
        parts[f"control {name} torch.empty_like(q)"] = lambda q=q: torch.empty_like(q)
        keep.append(cache)
    tiny = torch.zeros(4, device=dev)
    parts["control tiny.add_(1)"] = lambda: tiny.add_(1)
    parts["control torch.empty(4)"] = lambda: torch.empty(4, device=dev)
    return parts, keep


def main() -> None:
    dev = torch.device("cuda", 0)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    probs = torch.softmax(torch.randn(1, 32000, device=dev), -1)
    parts = {f"sampling {k}": v for k, v in bench_calls(probs).items()}
    decode, _keep = decode_parts(dev, ws)
    parts.update(decode)
    warm_up_host()
    times = {name: [] for name in parts}
    for _ in range(3):
        for name, fn in parts.items():
            times[name].append(busy_host_us(fn))
    us = {name: statistics.median(ts) for name, ts in times.items()}
    with open(sys.argv[1], "w") as f:
        json.dump({"us": us, "tokens": {}}, f, indent=1)
    for name, t in us.items():
        print(f"{t:8.2f}  {name}")


if __name__ == "__main__":
    main()
