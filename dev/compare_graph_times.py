"""Compares time_sampling_graph.py outputs of two configurations (a lab tool): medians per
case of A's two runs and B's two runs, B / A, and whether every run drew the same tokens.

    python dev/compare_graph_times.py A1.json A2.json B1.json B2.json
"""

import json
import statistics
import sys


def main():
    a = [json.load(open(f)) for f in sys.argv[1:3]]
    b = [json.load(open(f)) for f in sys.argv[3:5]]
    for case in a[0]["us"]:
        x = [r["us"][case] for r in a]
        y = [r["us"][case] for r in b]
        same = all(r["tokens"].get(case) == a[0]["tokens"].get(case) for r in a + b)
        ratio = statistics.median(y) / statistics.median(x)
        print(
            f"{case:34s} A {x[0]:7.1f} {x[1]:7.1f}  B {y[0]:7.1f} {y[1]:7.1f}  B/A {ratio:5.3f}"
            + ("" if same else "  TOKENS DIFFER")
        )


if __name__ == "__main__":
    main()
