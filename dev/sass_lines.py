"""Which source lines a kernel's executed instructions and stall samples come from (a lab
tool, any machine). Joins the SASS source page of Nsight Compute (the CSV of
dev/ncu_source_summary.py, with an instruction's executions and samples by address) with
`nvdisasm -g` or `-gi` of the same cubin (its "//## File ..., line N" marks give each SASS offset a
source line); dev/ncu_lines.sh writes both from a -lineinfo build.

Each profiled kernel is matched to the disassembled function whose opcode sequence it has
(ncu names kernels demangled, nvdisasm mangled; the code itself is the same), and offsets are
counted from the kernel's first address. Prints, per kernel, its source lines by warp
instructions executed, with the share of stall samples and the execution counts seen on the
line (a line run by each warp once shows the warp count, e.g. 128 for 8 CTAs x 16 warps).

With DEPTH > 0 (nvdisasm -gi), lines are grouped by the outermost DEPTH frames of their
inlining chain instead (the kernel's phases: which call of the kernel body they serve).

With --reasons, each line also shows its samples' main stall reasons (shares of the line's
samples, the "stall_*" columns: long_sb a global load's result, lg the load/store queue,
barrier a __syncthreads, ...).

    python dev/sass_lines.py [--reasons] ncu-src.csv[.gz] nvdisasm.txt[.gz] [TOP] [DEPTH] \
        [SOURCE_ROOT]
"""

from __future__ import annotations

import collections
import gzip
import os
import re
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(__file__))
from ncu_source_summary import Kernel, opcode, read_kernels, reason_shares  # noqa: E402

FUNCTION = re.compile(r"^\.text\.(\S+):$")
FILE_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def _open(path: str):
    return (
        gzip.open(path, "rt", errors="replace")
        if path.endswith(".gz")
        else open(path, errors="replace")
    )


def read_functions(lines) -> Dict[str, List[Tuple[int, str, Tuple[str, ...]]]]:
    """nvdisasm -g / -gi text -> {mangled name: [(offset, opcode, chain), ...]}, the chain
    being the instruction's source lines ("file:line"), innermost first (with -gi, one per
    level of inlining; with -g, one)."""
    functions: Dict[str, List[Tuple[int, str, Tuple[str, ...]]]] = {}
    current: List[Tuple[int, str, Tuple[str, ...]]] = []
    chain: Tuple[str, ...] = ("?",)
    pending: List[str] = []
    for line in lines:
        m = FUNCTION.match(line.strip())
        if m:
            current = functions.setdefault(m.group(1), [])
            chain, pending = ("?",), []
            continue
        m = FILE_LINE.search(line)
        if m:
            pending.append(f"{m.group(1)}:{m.group(2)}")
            continue
        m = INSTRUCTION.search(line)
        if m:
            if pending:
                chain, pending = tuple(pending), []
            current.append((int(m.group(1), 16), opcode(m.group(2)), chain))
    return functions


def match(kernel: Kernel, functions) -> str:
    """The function whose opcodes agree with the kernel's most (same length first)."""
    ops = [opcode(line.sass) for line in kernel.lines]
    best, score = "", -1.0
    for name, code in functions.items():
        if len(code) != len(ops):
            continue
        same = sum(a == b[1] for a, b in zip(ops, code)) / max(len(ops), 1)
        if same > score:
            best, score = name, same
    return best


def short(where: str) -> str:
    for mark in ("/csrc/", "/include/"):
        if mark in where:
            return where.split(mark, 1)[1]
    return where


def source_text(where: str, root: str) -> str:
    path, _, number = short(where).rpartition(":")
    full = os.path.join(root, path)
    try:
        with open(full, errors="replace") as f:
            return f.read().splitlines()[int(number) - 1].strip()[:70]
    except (OSError, IndexError, ValueError):
        return ""


def own(chain: Tuple[str, ...]) -> Tuple[str, ...]:
    """The chain without the CUDA headers' frames (intrinsics), innermost first."""
    mine = tuple(w for w in chain if "/include/" not in w)
    return mine or chain


def by_line(kernel: Kernel, code, depth: int = 0):
    """{where: [warp instructions executed, samples, Counter of execution counts, Counter of
    stall reasons' samples]}, where is the innermost own source line (depth 0) or the
    outermost `depth` own frames (the kernel's call path: which phase of the kernel the
    instruction belongs to)."""
    start = int(kernel.lines[0].address, 16)
    where_at = {offset: own(chain) for offset, _, chain in code}
    table: Dict[str, list] = collections.defaultdict(
        lambda: [0, 0, collections.Counter(), collections.Counter()]
    )
    for line in kernel.lines:
        chain = where_at.get(int(line.address, 16) - start, ("?",))
        where = chain[0] if depth == 0 else " < ".join(short(w) for w in chain[-depth:])
        row = table[where]
        row[0] += line.executed
        row[1] += line.samples
        if line.executed:
            row[2][line.executed] += 1
        row[3].update(line.reasons)
    return table


def main_reasons(reasons: collections.Counter, samples: int, top: int = 4) -> str:
    """The `top` stall reasons of a line's samples, as "long_sb 41%, ..."."""
    if samples <= 0:
        return ""
    return ", ".join(f"{r} {share:.0f}%" for r, share in reason_shares(reasons, samples, top))


def report(
    kernel: Kernel, functions, top: int, root: str, depth: int = 0, reasons: bool = False
) -> str:
    name = match(kernel, functions)
    if not name:
        return f"{kernel.name}: no disassembled function has its {len(kernel.lines)} instructions"
    table = by_line(kernel, functions[name], depth)
    executed = max(sum(r[0] for r in table.values()), 1)
    samples = max(sum(r[1] for r in table.values()), 1)
    out = [
        f"{kernel.name}: {executed / 1e6:.3f} M warp instructions, {samples} samples ({name[:60]})"
    ]
    out.append("  instr%  samp%  counts (x instructions)            line")
    for where, (n, s, counts, why) in sorted(table.items(), key=lambda kv: -kv[1][0])[:top]:
        seen = ",".join(f"{c}x{k}" for c, k in counts.most_common(3))
        text = source_text(where, root) if depth == 0 else ""
        shares = f"{100 * n / executed:5.1f}  {100 * s / samples:5.1f}"
        out.append(f"  {shares}  {seen:34s} {short(where)}  {text}")
        if reasons and s:
            out.append(f"                 stalls: {main_reasons(why, s)}")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    reasons = "--reasons" in args
    args = [a for a in args if a != "--reasons"]
    csv_path, dis_path = args[0], args[1]
    top = int(args[2]) if len(args) > 2 else 30
    depth = int(args[3]) if len(args) > 3 else 0
    default_root = os.path.join(os.path.dirname(__file__), "..", "providers", "csrc")
    root = args[4] if len(args) > 4 else default_root
    with _open(dis_path) as f:
        functions = read_functions(f)
    with _open(csv_path) as f:
        kernels = read_kernels(f)
    for kernel in kernels:
        print(report(kernel, functions, top, root, reasons=reasons))
        if depth:
            print(report(kernel, functions, top, root, depth, reasons))


if __name__ == "__main__":
    main()
