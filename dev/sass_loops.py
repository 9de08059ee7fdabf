"""The loops of a kernel's SASS with and without a lab macro (a lab tool, any machine with nvcc
and nvdisasm on PATH, as dev/sass_sizes.py): for each kernel whose mangled name matches
KERNEL (a regular expression), each loop (a backward branch and the code from its target)
that holds at least MIN instructions of OPCODE, in both builds: its length, the OPCODE count,
instructions per OPCODE (per element, for a histogram loop whose elements each do one
ATOMS.POPC.INC), and its BSSY, BRA and S2UR counts (convergence regions, branches and
special-register reads: what a branchy body costs besides its work), and where in the body its
first global loads are issued (a trip's loads all near its top are in flight together; spread
through the body, ptxas has serialised them behind the work). Static code, no device time: a
prediction's input, not a measurement of speed.

    python dev/sass_loops.py SOURCE.cu AOTINFER_LAB_X KERNEL [OPCODE] [MIN]
    python dev/sass_loops.py providers/csrc/sampling/sample_launch.cu \\
        AOTINFER_LAB_X 'sample_kernelILNS0_12FilterFamilyE3ELi512' ATOMS.POPC.INC 16
"""

from __future__ import annotations

import re
import sys
import tempfile
from typing import Dict, List, Tuple

from sass_lines import FUNCTION, INSTRUCTION
from sass_sizes import disassemble

LABEL = re.compile(r"^(\.L_x_\d+):$")
BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")

Loop = Tuple[int, int, List[str]]  # first and last offset, the instructions (text)


def loops(text: str) -> Dict[str, List[Loop]]:
    """nvdisasm text -> {function: [loop, ...]}: a loop per branch to a label at or before it
    (the label's first instruction to the branch), innermost and outermost alike."""
    found: Dict[str, List[Loop]] = {}
    code: List[Tuple[int, str]] = []
    labels: Dict[str, int] = {}

    def close(name):
        if name is None:
            return
        for i, (offset, sass) in enumerate(code):
            m = BRANCH.search(sass)
            if m and m.group(1) in labels and labels[m.group(1)] <= i:
                start = labels[m.group(1)]
                body = [s for _, s in code[start : i + 1]]
                found.setdefault(name, []).append((code[start][0], offset, body))

    name = None
    for line in text.splitlines():
        stripped = line.strip()
        m = FUNCTION.match(stripped)
        if m:
            close(name)
            name, code, labels = m.group(1), [], {}
            continue
        m = LABEL.match(stripped)
        if m:
            labels[m.group(1)] = len(code)
            continue
        m = INSTRUCTION.search(line)
        if m and name is not None:
            code.append((int(m.group(1), 16), m.group(2)))
    close(name)
    return found


def count(body: List[str], op: str) -> int:
    return sum(op in s for s in body)


def summary(body: List[str], op: str) -> str:
    n = count(body, op)
    words = [s.split()[1] if s.startswith("@") else s.split()[0] for s in body]
    tally = {k: sum(w.startswith(k) for w in words) for k in ("BSSY", "BRA", "S2UR")}
    per = f"{len(body) / n:.1f}" if n else "-"
    loads = [str(i) for i, w in enumerate(words) if w.startswith("LDG")]
    where = f", LDG at {' '.join(loads[:4])}" if loads else ""
    return (
        f"{len(body)} instructions, {n} {op} ({per} per), "
        + ", ".join(f"{k} {v}" for k, v in tally.items())
        + where
    )


def report(text: str, kernel: str, op: str, least: int) -> List[str]:
    lines = []
    for name, found in loops(text).items():
        if not re.search(kernel, name):
            continue
        for start, end, body in found:
            if count(body, op) >= least:
                lines.append(f"  {name[:70]} [{start:#x}, {end:#x}]: {summary(body, op)}")
    return lines


def main():
    source, macro, kernel = sys.argv[1:4]
    op = sys.argv[4] if len(sys.argv) > 4 else "ATOMS.POPC.INC"
    least = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    with tempfile.TemporaryDirectory() as tmp:
        for side, defines in (("default", []), (f"-D{macro}", [f"-D{macro}"])):
            text, _ = disassemble(source, defines, tmp, side.strip("-"))
            print(f"{source} {side}: loops with >= {least} {op}")
            print("\n".join(report(text, kernel, op, least)) or "  none")


if __name__ == "__main__":
    main()
