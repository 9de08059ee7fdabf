"""The batch-1 goal cases beside FlashInfer, graph times only (a lab tool, GPU machine): every
bench_sampling op at the shapes given (default 1 x 32000, flat and peaked rows), ours and
FlashInfer's per call in a CUDA graph of >= 10 calls over the same rotating inputs, each
timed ROUNDS times alternately (ours, FlashInfer, ours, ...) so that a slow stretch of the
host lands on both. For a device call too short for the whole record: the one goal case
left (joint 1 x 32000 peaked) measured beside FlashInfer in ~2 minutes after the JIT.

    python3 dev/time_goal_cases.py [OUT.json] [BATCH x VOCAB ...]   e.g. 1x32000 16x32000
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us, try_import_flashinfer  # noqa: E402
from bench_sampling import cases, shapes  # noqa: E402

ROUNDS = 3


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].endswith(".json") else None
    specs = [a for a in sys.argv[1:] if "x" in a and not a.endswith(".json")] or ["1x32000"]
    fi = try_import_flashinfer()
    seeded = cases(fi, {"seed": 1234, "offset": 0})
    rows = []
    for spec in specs:
        batch, vocab = (int(v) for v in spec.split("x"))
        for shape, _, sets in shapes((vocab,), [batch]):
            for name, (ours, _, fib, _) in seeded.items():
                times = {"ours": [], "fi": []}
                for _ in range(ROUNDS):
                    times["ours"].append(rotation_graph_us(ours, sets))
                    if fib is not None:
                        times["fi"].append(rotation_graph_us(fib, sets))
                row = {"op": name, **shape, "graph_us": statistics.median(times["ours"])}
                if times["fi"]:
                    row["fi_graph_us"] = statistics.median(times["fi"])
                    row["vs_fi_graph"] = row["fi_graph_us"] / row["graph_us"]
                row["rounds"] = times
                rows.append(row)
                vs = f"{row['vs_fi_graph']:.3f}" if "vs_fi_graph" in row else "-"
                fi_us = f"{row['fi_graph_us']:7.2f}" if "fi_graph_us" in row else "      -"
                print(
                    f"{name:22s} {batch:4d} x {vocab:6d} {shape['dist']:6s}"
                    f" ours {row['graph_us']:7.2f}  flashinfer {fi_us}  vs_fi {vs}",
                    flush=True,
                )
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
