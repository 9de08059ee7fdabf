"""CUDA-graph times of bench_decode_configs.py's cases (ours only), for A/B runs (a lab tool,
not a benchmark of record): JSON {"us": {case: us}, "tokens": {case: checksum}} for
dev/compare_graph_times.py (the checksum is the output's sum; builds that split or round
differently differ there: compare the times).

    python3 dev/time_decode_configs.py OUT.json [config-name-prefix ...]   (GPU machine)

LAB_SHAPES="4x4096 8x1024" replaces the benchmark's (batch x kv) shapes; LAB_CHUNKS="auto 4 8"
times each case with the planner's own chunk ("auto") and with each forced chunk (pages a
piece; plan_work's force_chunk), as cases "<case> chunk=<c>" (the split plan printed).
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us  # noqa: E402
from bench_decode_configs import BASE, CONFIGS, SHAPES, case_inputs, plan_for  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _decode_plan as dp  # noqa: E402

REAL_PLAN_WORK = dp.plan_work


def planned(w, cfg, table, chunk):
    """w.plan() for cfg, with plan_work's chunk forced unless ``chunk`` is "auto"."""
    if chunk != "auto":
        dp.plan_work = lambda *a, **k: REAL_PLAN_WORK(*a, **dict(k, force_chunk=int(chunk)))
    try:
        plan_for(w, cfg, table)
    finally:
        dp.plan_work = REAL_PLAN_WORK


def main() -> None:
    out_path, prefixes = sys.argv[1], sys.argv[2:]
    us, sums = {}, {}
    shapes = SHAPES
    chunks = os.environ.get("LAB_CHUNKS", "auto").split()
    if os.environ.get("LAB_SHAPES"):
        shapes = [tuple(int(x) for x in s.split("x")) for s in os.environ["LAB_SHAPES"].split()]
    for name, axes in CONFIGS:
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        cfg = {**BASE, **axes}
        for batch, kv in shapes:
            table, caches, q, _ = case_inputs(cfg, batch, kv)
            w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), cfg["layout"]
            )
            for chunk in chunks:
                planned(w, cfg, table, chunk)
                case = f"{name} {batch}x{kv}" + (f" chunk={chunk}" if chunks != ["auto"] else "")
                us[case] = rotation_graph_us(lambda c, w=w, q=q: w.run(q, c), caches)
                sums[case] = round(float(w.run(q, caches[0][0]).double().sum()), 2)
                split = w._plan.split
                print(
                    f"{case}: {us[case]:.1f} us, chunk_pages {split.chunk_pages}, "
                    f"max_splits {split.max_splits}",
                    file=sys.stderr,
                    flush=True,
                )
            del caches
            torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump({"us": us, "tokens": sums}, f)


if __name__ == "__main__":
    main()
