"""Static SASS of a translation unit with and without a lab macro (a lab tool, any machine with
nvcc and nvdisasm on PATH; the CI machine gets nvdisasm from the nvidia-cuda-nvdisasm wheel):
per kernel whose size, registers or spills differ, its instruction count, registers and spill
bytes in both builds; with TAG ("file.cuh:LINE"), also the instructions whose inlining chain
passes that source line (a pass's code, e.g. the segment_pass call of gather_crossing_bin).
No device time: a prediction's input, not a measurement of speed.

    python dev/sass_sizes.py SOURCE.cu AOTINFER_LAB_X [TAG_DEFAULT TAG_LAB]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from sass_lines import read_functions  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
FLAGS = ["-arch=sm_90a", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-lineinfo"]


def disassemble(source: str, defines: list, tmp: str, name: str, root: str = ROOT):
    """(nvdisasm -gi text, {kernel: (registers, spill bytes)}) of one compile (source and
    includes from the tree at root)."""
    cubin = os.path.join(tmp, f"{name}.cubin")
    source = os.path.join(root, source) if root != ROOT else source
    cmd = ["nvcc", "-cubin", *FLAGS, f"-I{root}/providers/csrc", *defines, "-Xptxas", "-v", source]
    log = subprocess.run(cmd + ["-o", cubin], capture_output=True, text=True, check=True).stderr
    usage, kernel = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        kernel = m.group(1) if m else kernel
        regs = re.search(r"Used (\d+) registers", line)
        spill = re.search(r"(\d+) bytes spill stores", line)
        if kernel and (regs or spill):
            r, s = usage.get(kernel, (0, 0))
            usage[kernel] = (int(regs.group(1)) if regs else r, int(spill.group(1)) if spill else s)
    dis = ["nvdisasm", "-gi", "-c", cubin]
    return subprocess.run(dis, capture_output=True, text=True, check=True).stdout, usage


def build(source: str, defines: list, tmp: str, name: str):
    """(functions of nvdisasm -gi, {kernel: (registers, spill bytes)}) of one compile."""
    text, usage = disassemble(source, defines, tmp, name)
    return read_functions(text.splitlines()), usage


def tagged(code, tag: str) -> int:
    return sum(any(where.endswith(tag) for where in chain) for _, _, chain in code)


def main():
    source, macro = sys.argv[1], sys.argv[2]
    tags = sys.argv[3:5]
    with tempfile.TemporaryDirectory() as tmp:
        base, base_use = build(source, [], tmp, "default")
        lab, lab_use = build(source, [f"-D{macro}"], tmp, "lab")
    print(f"{source}, default -> -D{macro} (sm_90a): instructions, (registers, spill bytes)")
    for name, code in base.items():
        other = lab.get(name, [])
        if len(code) == len(other) and base_use.get(name) == lab_use.get(name):
            continue
        line = f"  {len(code):6d} -> {len(other):6d}  {base_use.get(name)} -> {lab_use.get(name)}"
        if tags:
            line += f"  {tags[0]} {tagged(code, tags[0])} -> {tags[1]} {tagged(other, tags[1])}"
        print(f"{line}  {name[:80]}")


if __name__ == "__main__":
    main()
