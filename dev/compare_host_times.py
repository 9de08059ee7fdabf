"""Compares host-time lab outputs (bench_common.print_host_times lines: "median (min-max)
name"): A1 A2 B1 B2 files, per part the median of A's and of B's medians and B / A.

    python dev/compare_host_times.py a-1.txt a-2.txt b-1.txt b-2.txt
"""

from __future__ import annotations

import re
import statistics
import sys

LINE = re.compile(r"^\s*([0-9.]+)\s+\(\s*[0-9.]+-\s*[0-9.]+\)\s+(.+?)\s*$")


def parse(path: str) -> dict:
    with open(path) as f:
        return {m.group(2): float(m.group(1)) for m in map(LINE.match, f) if m}


def main(paths) -> None:
    a1, a2, b1, b2 = (parse(p) for p in paths)
    print(f"{'A us':>8} {'B us':>8} {'B / A':>7}  part")
    for name in a1:
        if name in a2 and name in b1 and name in b2:
            a = statistics.median([a1[name], a2[name]])
            b = statistics.median([b1[name], b2[name]])
            print(f"{a:8.2f} {b:8.2f} {b / a:7.3f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
