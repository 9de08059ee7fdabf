"""Phase timelines of the batch-1 cluster samplers (a lab tool, GPU machine, with a provider
built with -DAOTINFER_LAB_SLICE_TRACE: lab_row_trace.cuh's lab_slice_print writes one SLICE
line per CTA). Each op runs on bench_sampling's rows in a CUDA graph of CALLS back-to-back
calls (the benchmark's setting: warm code, launches queued), replayed REPS times; the summary
splits the lines into launches (CTAs ordered by their entry on the global clock, kCtas a
launch) and prints, per op, the median SM cycles of each phase: the slice's load, the list
bound t_c (its histogram's fill, then the scan and what follows), the listing (t_c to the list
exchange), the wait at the exchange's cluster barrier, then rank 0's t_k and the rest of its
draw, for rank 0 and the slowest CTA, and the launch's entry skew. Top-p by rejection (family
5) marks round 0's steps instead (lab_row_trace.cuh): its pass over the slice, its draw (the
cluster's push of totals and largest keys), the drawn key's exchange, the test pass and the
test's exchange; "rest" is what follows (further rounds, the write).

    python3 dev/trace_slice_phases.py [DIST ...] > trace.txt    (collect; default peaked)
    python3 dev/trace_slice_phases.py --summary trace.txt        (summarise)
"""

from __future__ import annotations

import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
from trace_records import trace_records  # noqa: E402

CALLS, REPS, CTAS = 10, 4, 8
PHASES = ("load", "fill", "scan", "listing", "exchange", "t_k", "rest")
REJECTION_FAMILY = 5  # FilterFamily::kTopPRejection (filter_sample.cuh)
REJECTION_PHASES = ("load", "pass0", "draw0", "pivot", "test", "tested", "rest")


def collect(dists: list[str]) -> None:
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from bench_sampling import make_probs

    import aotinfer

    s = dict(seed=1, offset=0)
    ops = {
        "top_k": lambda p: aotinfer.top_k_sampling_from_probs(p, 50, **s),
        "joint": lambda p: aotinfer.top_k_top_p_sampling_from_probs(
            p, 50, 0.9, filter_apply_order="joint", **s
        ),
        "top_k_first": lambda p: aotinfer.top_k_top_p_sampling_from_probs(
            p, 50, 0.9, filter_apply_order="top_k_first", **s
        ),
        "top_p": lambda p: aotinfer.top_p_sampling_from_probs(p, 0.9, **s),
    }
    for dist in dists:
        rows = [make_probs(1, 32000, dist == "peaked", seed=i) for i in range(CALLS)]
        for name, fn in ops.items():
            fn(rows[0])  # loaded and warm
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for r in rows:
                    fn(r)
            torch.cuda.synchronize()
            for rep in range(REPS):
                print(f"LAUNCH {name} 1x32000 {dist} rep {rep}", flush=True)
                graph.replay()
                torch.cuda.synchronize()
                sys.stdout.flush()
            del graph


def launches_of(lines: list[list[int]]) -> list[list[list[int]]]:
    """SLICE fields (family, ctas a SM, rank, sm, g0, d1..d4, end) grouped into launches."""
    lines = sorted(lines, key=lambda f: f[4])
    return [lines[i : i + CTAS] for i in range(0, len(lines) - CTAS + 1, CTAS)]


def rejection_phases(f: list[int]) -> dict:
    """A top-p rejection CTA's phases in cycles: marks 1-6 in order, each phase from the mark
    before; a mark not reached (0) gives its phase 0 and the next one's from the last reached."""
    marks = [f[5], f[6], f[7], f[8], f[10], f[11]]
    out, last = {}, 0
    for name, m in zip(REJECTION_PHASES, marks):
        out[name] = m - last if m else 0
        last = m or last
    out["rest"] = f[9] - last
    out["end"] = f[9]
    return out


def phases(f: list[int]) -> dict:
    """A CTA's phases in cycles: the slice bound split at its histogram's fill (mark 6), rank
    0's draw at t_k (mark 5). Lines of the first trace (no marks 5 and 6) give fill = the
    whole bound and t_k = 0."""
    d1, d2, d3, d4, end = f[5:10]
    d5, d6 = (f[10], f[11]) if len(f) > 11 else (0, 0)
    fill_end = d6 or d2
    t_k_end = d5 or d4
    return {
        "load": d1,
        "fill": fill_end - d1,
        "scan": d2 - fill_end,
        "listing": d3 - d2,
        "exchange": d4 - d3,
        "t_k": t_k_end - d4,
        "rest": end - t_k_end,
        "end": end,
    }


def summarise(path: str) -> None:
    cases: dict[str, list[list[int]]] = defaultdict(list)
    for name, fields in trace_records(path, "SLICE", 3):
        if fields is not None:
            cases[name].append([int(x) for x in fields])
    med = statistics.median
    for name, lines in cases.items():
        launches = [
            ls for ls in launches_of(lines) if sorted(f[2] for f in ls) == list(range(CTAS))
        ]
        if not launches:
            print(f"== {name}: no whole launch")
            continue
        rejection = launches[0][0][0] == REJECTION_FAMILY
        of, names = (rejection_phases, REJECTION_PHASES) if rejection else (phases, PHASES)
        # The slowest peer: the last to reach the first cluster exchange of the draw.
        before = names[:2] if rejection else names[:4]
        rank0 = [of(next(f for f in ls if f[2] == 0)) for ls in launches]
        slowest = [
            max((of(f) for f in ls if f[2] != 0), key=lambda p: sum(p[k] for k in before))
            for ls in launches
        ]
        skew = [(max(f[4] for f in ls) - min(f[4] for f in ls)) for ls in launches]
        fam = launches[0][0][0], launches[0][0][1]
        print(
            f"== {name}: family {fam[0]}, {fam[1]} CTA(s) a SM, {len(launches)} launches;"
            f" entry skew median {med(skew)} ns"
        )
        print("   cycles (median)  " + "  ".join(f"{p:>8}" for p in names + ("end",)))
        for label, rows in (("rank 0", rank0), ("slowest peer", slowest)):
            print(
                f"   {label:<15}  "
                + "  ".join(f"{med([r[p] for r in rows]):>8.0f}" for p in names + ("end",))
            )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--summary":
        summarise(sys.argv[2])
    else:
        collect(sys.argv[1:] or ["peaked"])
