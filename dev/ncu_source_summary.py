"""Where a kernel's instructions go, from Nsight Compute's source page (a lab tool, any
machine): reads the CSV that

    ncu --profile-from-start off --clock-control none --launch-count 2 \
        --section SourceCounters --section WarpStateStats --page source --print-source sass \
        --csv python3 dev/ncu_targets.py sampling > src.csv

writes (one table of SASS lines per profiled kernel), splits each kernel's code into runs of
consecutive instructions that executed equally often (the body of one loop trip, between
branches) and prints, per kernel, its executed instructions and stall samples in all and for
the runs that executed most, with their instruction mix; with HOT, also the kernel's stall
reasons (shares of its samples) and its HOT SASS lines with the most samples. A loop is
recognised by its count: in the one-CTA-per-row sampling kernels at 128 rows x 1024 threads,
level 0 of a search runs
29952 times per instruction and a segment pass 32768 (dev/NOTES.md item 38).

    python dev/ncu_source_summary.py src.csv [TOP [HOT]]
"""

from __future__ import annotations

import collections
import csv
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List

EXECUTED = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"


@dataclass
class Run:
    """Consecutive SASS lines with one execution count."""

    executed: int  # per instruction
    start: int
    opcodes: List[str] = field(default_factory=list)
    samples: int = 0

    @property
    def total(self) -> int:
        return self.executed * len(self.opcodes)


@dataclass
class Line:
    """One SASS line: its address, text, executions, stall samples by reason (stall_*)."""

    address: str
    sass: str
    executed: int
    samples: int
    reasons: Dict[str, int]


@dataclass
class Kernel:
    name: str
    runs: List[Run]
    lines: List[Line] = field(default_factory=list)

    @property
    def executed(self) -> int:
        return sum(r.total for r in self.runs)

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.runs)


def opcode(sass: str) -> str:
    """The opcode of one SASS line without its predicate and modifiers ("@P0 ISETP.GE.AND" ->
    "ISETP")."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def read_kernels(lines: Iterable[str]) -> List[Kernel]:
    """The kernels of a source-page CSV, each split into runs."""
    kernels: List[Kernel] = []
    rows: List[str] = []

    def finish():
        if not rows:
            return
        table = list(csv.reader(rows))
        name, header, body = table[0][1], table[1], table[2:]
        col = {h: i for i, h in enumerate(header)}
        reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
        runs: List[Run] = []
        lines: List[Line] = []
        for i, r in enumerate(body):
            executed = int(r[col[EXECUTED]] or 0)
            if not runs or runs[-1].executed != executed:
                runs.append(Run(executed, i))
            runs[-1].opcodes.append(opcode(r[col["Source"]]))
            samples = int(r[col[SAMPLES]] or 0)
            runs[-1].samples += samples
            by_reason = {h[len("stall_") :]: int(r[col[h]] or 0) for h in reasons}
            text = r[col["Source"]].strip()
            lines.append(Line(r[col["Address"]], text, executed, samples, by_reason))
        kernel = Kernel(name, runs, lines)
        if not kernels or kernels[-1] != kernel:  # ncu prints each kernel's page twice
            kernels.append(kernel)

    for line in lines:
        if line.startswith('"Kernel Name"'):
            finish()
            rows = [line]
        elif rows and line.startswith('"'):
            rows.append(line)
    finish()
    return kernels


def summary(kernel: Kernel, top: int = 12) -> str:
    out = [
        f"{kernel.name}: {kernel.executed / 1e6:.2f} M instructions executed, "
        f"{kernel.samples} stall samples"
    ]
    by_count: Dict[int, List[Run]] = collections.defaultdict(list)
    for r in kernel.runs:
        by_count[r.executed].append(r)
    out.append("  by execution count (the instructions of one loop run equally often):")
    counts = sorted(by_count, key=lambda c: -sum(r.total for r in by_count[c]))
    for c in counts[:top]:
        runs = by_count[c]
        total = sum(r.total for r in runs)
        samples = sum(r.samples for r in runs)
        mix = collections.Counter(op for r in runs for op in r.opcodes).most_common(6)
        instructions = sum(len(r.opcodes) for r in runs)
        share = 100 * total / max(kernel.executed, 1)
        sampled = 100 * samples / max(kernel.samples, 1)
        out.append(
            f"  {c:>9d} x {instructions:4d} instructions = {total / 1e6:6.2f} M"
            f" ({share:4.1f}%), samples {sampled:4.1f}%"
            f"  {', '.join(f'{op} {n}' for op, n in mix)}"
        )
    return "\n".join(out)


def reason_shares(reasons: collections.Counter, whole: int, top: int):
    """[(reason, percent of whole)] for the `top` largest nonzero stall reasons."""
    whole = max(whole, 1)
    return [(r, 100 * n / whole) for r, n in reasons.most_common(top) if n]


def hot_lines(kernel: Kernel, hot: int) -> str:
    """The kernel's stall reasons as shares of its samples, then its `hot` SASS lines with the
    most samples: address, executions, samples, text and the line's two largest reasons."""
    totals: collections.Counter = collections.Counter()
    for line in kernel.lines:
        totals.update(line.reasons)
    shares = [f"{r} {share:.1f}%" for r, share in reason_shares(totals, sum(totals.values()), 8)]
    out = ["  stall reasons: " + " ".join(shares)]
    for line in sorted(kernel.lines, key=lambda x: -x.samples)[:hot]:
        two = sorted(line.reasons.items(), key=lambda x: -x[1])[:2]
        why = " ".join(f"{r}:{n}" for r, n in two if n)
        counts = f"{line.executed:>9d} x {line.samples:>6d} samples"
        out.append(f"  {line.address} {counts}  {line.sass[:56]:56s} {why}")
    return "\n".join(out)


def main():
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    hot = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(sys.argv[1], errors="replace") as f:
        for kernel in read_kernels(f):
            print(summary(kernel, top))
            if hot:
                print(hot_lines(kernel, hot))


if __name__ == "__main__":
    main()
