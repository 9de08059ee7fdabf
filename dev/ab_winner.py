"""Reads a comparison printed by dev/compare_graph_times.py (dev/ab_provider_builds.sh's
ab-provider-builds.txt, dev/ab_provider_labs.sh's ab-<lab>.txt) and prints "b" when the mean
B / A over the cases matching a pattern is below a threshold, else "a": the wheel to install
for a benchmark that should run on the winner, in the same device call (a lab tool).

Only lines with a "B/A" field count; a pattern that matches none of them is an error, not a
silent "b" (session 19's first selection averaged the timing lines too and picked a loser).

    python3 dev/ab_winner.py FILE PATTERN [THRESHOLD=0.985] [EXPECTED_CASES]
    r=$(python3 dev/ab_winner.py $OUT/ab-provider-builds.txt 'top_k_mask 128x128256' 0.985 2)
"""

from __future__ import annotations

import re
import sys


def ratios(lines, pattern: str) -> list:
    found = []
    for line in lines:
        fields = line.split()
        if "B/A" not in fields or not re.search(pattern, line):
            continue
        found.append(float(fields[fields.index("B/A") + 1]))
    return found


def main() -> None:
    path, pattern = sys.argv[1], sys.argv[2]
    threshold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.985
    expected = int(sys.argv[4]) if len(sys.argv) > 4 else None
    with open(path) as f:
        found = ratios(f, pattern)
    if not found or (expected is not None and len(found) != expected):
        want = expected or "some"
        sys.exit(f"{path}: {len(found)} B/A lines match {pattern!r} (expected {want})")
    mean = sum(found) / len(found)
    print("b" if mean < threshold else "a")
    print(f"mean B/A {mean:.3f} over {len(found)} cases (threshold {threshold})", file=sys.stderr)


if __name__ == "__main__":
    main()
