"""Per-row timelines of the top-p rejection row kernels (a lab tool, GPU machine, with a
provider built with -DAOTINFER_LAB_ROW_TRACE: top_p_rejection.cuh's LabRowTrace prints one
TRACE line per row). Runs top-p 0.9 on bench_sampling's rows (each shape REPS times, new
seeds), then summarises every launch: the kernel's span on the global clock, when its rows
end (SM cycles from their entry), what round 0's pass costs and what each later round adds,
by rounds and by exact test passes.

    python3 dev/trace_rejection_rows.py [BATCH x VOCAB ...] > trace.txt    (collect)
    python3 dev/trace_rejection_rows.py --summary trace.txt                (summarise)
"""

from __future__ import annotations

import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
from trace_records import trace_records  # noqa: E402

REPS = 6


def collect(shapes: list[tuple[int, int]]) -> None:
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from bench_sampling import make_probs

    import aotinfer

    for batch, vocab in shapes:
        for peaked in (False, True):
            probs = make_probs(batch, vocab, peaked, seed=vocab + batch + peaked)
            for rep in range(REPS):
                torch.cuda.synchronize()
                kind = "peaked" if peaked else "flat"
                print(f"LAUNCH {batch}x{vocab} {kind} rep {rep}", flush=True)
                aotinfer.sampling.top_p_sampling_from_probs(probs, 0.9, seed=rep, offset=0)
                torch.cuda.synchronize()
                sys.stdout.flush()


def summarise(path: str) -> None:
    launches: dict[str, list[dict]] = defaultdict(list)
    for name, fields in trace_records(path, "TRACE", 2):
        if fields is None:
            launches[name].append([])
        else:
            f = dict(zip(fields[0:18:2], map(int, fields[1:19:2])))
            f["at"] = [int(x) for x in fields[19:23]]
            launches[name][-1].append(f)
    for name, reps in launches.items():
        spans, ends, pass0, by_rounds, exact_ends, slowest = [], [], [], defaultdict(list), [], []
        for rows in reps:
            if not rows:
                continue
            spans.append((max(r["g1"] for r in rows) - min(r["g0"] for r in rows)) / 1e3)
            ends += [r["end"] for r in rows]
            pass0 += [r["pass0"] for r in rows]
            for r in rows:
                by_rounds[r["rounds"]].append(r["end"])
                if r["exact"]:
                    exact_ends.append(r["end"])
            top = max(rows, key=lambda r: r["end"])
            slowest.append(f"{top['end']}c r{top['rounds']} x{top['exact']} s{top['settled']}")
        med = statistics.median
        span = f"span median {med(spans):.1f} us, min {min(spans):.1f}"
        print(f"== {name}: {len(reps)} launches, {span}")
        print(f"   row end cycles: median {med(ends)}, max {max(ends)}; round-0 pass {med(pass0)}")
        for k in sorted(by_rounds):
            v = by_rounds[k]
            print(f"   {k} round(s): {len(v)} rows, end median {med(v)} max {max(v)}")
        multi = [r for rows in reps for r in rows if r["rounds"] >= 2]
        if multi:
            first = med([r["at"][0] - r["pass0"] for r in multi])
            second = med([r["end"] - r["at"][0] for r in multi if r["rounds"] == 2] or [0])
            print(
                f"   2+ round rows: round 0 after its pass {first}; 2-round rows' round 1 {second}"
            )
        one = [r["end"] - r["pass0"] for rows in reps for r in rows if r["rounds"] == 1]
        if one:
            print(f"   1-round rows: after the pass {med(one)} cycles")
        if exact_ends:
            print(
                f"   rows with an exact test pass: {len(exact_ends)}, ending at {med(exact_ends)}"
            )
        print(f"   slowest row per launch: {', '.join(slowest)}")


def main() -> None:
    if sys.argv[1:2] == ["--summary"]:
        summarise(sys.argv[2])
        return
    default = [(128, 32000), (512, 32000), (128, 128256)]
    shapes = [tuple(map(int, a.split("x"))) for a in sys.argv[1:]] or default
    collect(shapes)


if __name__ == "__main__":
    main()
