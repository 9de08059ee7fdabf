"""Which kernels of one build have the very SASS of another build's (a lab tool, any machine
with nvcc, nvdisasm and git; no device time). It answers "was every kernel that ships
measured as it ships?" when a change adopts a lab for some kernels only: compile the tree
to ship and the builds that were measured, and name, per kernel of the first, the others
whose code for it is identical (branch labels renumbered, so a kernel's place in the
cubin does not matter).

Each build is REV[:MACRO[,MACRO...]]: REV a git revision, or "." for the working tree, and
the lab macros it was measured with; its providers/csrc is compiled as dev/sass_sizes.py
compiles (sm_90a; its -lineinfo leaves the code as the wheel's: checked in session 31).

    python dev/sass_same.py SOURCE.cu BUILD REFERENCE [REFERENCE...] [--kernels REGEX]
    python dev/sass_same.py providers/csrc/sampling/sample_launch.cu . \\
        e794967:AOTINFER_LAB_SLICE_PEEL b4a202f --kernels sampling
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List

from sass_lines import FUNCTION, INSTRUCTION
from sass_sizes import ROOT, disassemble

LABEL = re.compile(r"\.L_x_\d+")
# Calls to the compiler's helpers (64-bit division ...) name them by their place in the cubin.
INTERNAL = re.compile(r"__internal_\d+_")


def kernels(text: str) -> Dict[str, List[str]]:
    """nvdisasm text -> {function: its instructions}, branch targets written as one label
    (their numbers follow the function's place in the cubin; the code around them is
    compared, and offsets are not), helpers without their number, the function's own name
    as SELF and runs of blanks as one (nvdisasm pads an annotation such as SpillRefill to the
    cubin's longest line, which other kernels' names set: session 31)."""
    found: Dict[str, List[str]] = {}
    body, name = None, ""
    for line in text.splitlines():
        m = FUNCTION.match(line.strip())
        if m:
            name = m.group(1)
            body = found.setdefault(name, [])
            continue
        m = INSTRUCTION.search(line)
        if m and body is not None:
            # A return names its own function: written as SELF, so that instances whose names
            # differ (same_code) compare by code alone.
            code = INTERNAL.sub("__internal_", LABEL.sub("L", m.group(2)))
            body.append(" ".join(code.replace(name, "SELF").split()))
    return found


def function_name(mangled: str) -> str:
    """The qualified function of an Itanium-mangled name without its template arguments
    (_ZN8aotinfer8sampling13sample_kernelI... -> aotinfer::sampling::sample_kernel)."""
    if not mangled.startswith("_ZN"):
        return mangled
    parts, i = [], 3
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        parts.append(mangled[j : j + n])
        i = j + n
    return "::".join(parts)


def same_code(name: str, body: List[str], code: Dict[str, List[str]]) -> bool:
    """Whether a reference build has this kernel's code: under its own name or, where the
    reference has no kernel of that name (an adopted lab gave the kernel a template argument
    of its own), under another instance of the same function."""
    if name in code:
        return code[name] == body
    base = function_name(name)
    return any(function_name(other) == base and theirs == body for other, theirs in code.items())


def matches(build: Dict[str, List[str]], references: Dict[str, Dict[str, List[str]]], pattern: str):
    """[(kernel, [names of the references with its code])] for the build's kernels that
    match pattern, in name order."""
    return [
        (name, [ref for ref, code in references.items() if same_code(name, body, code)])
        for name, body in sorted(build.items())
        if re.search(pattern, name)
    ]


def compile_build(spec: str, source: str, tmp: str) -> Dict[str, List[str]]:
    rev, _, macros = spec.partition(":")
    tree = ROOT
    if rev != ".":
        tree = os.path.join(tmp, re.sub(r"\W", "_", spec))
        os.makedirs(tree)
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", rev, "providers/csrc"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    defines = [f"-D{m}" for m in macros.split(",") if m]
    text, _ = disassemble(source, defines, tmp, re.sub(r"\W", "_", spec), root=tree)
    return kernels(text)


def main():
    args = sys.argv[1:]
    pattern = ""
    if "--kernels" in args:
        i = args.index("--kernels")
        pattern = args[i + 1]
        del args[i : i + 2]
    source, build, refs = args[0], args[1], args[2:]
    with tempfile.TemporaryDirectory() as tmp:
        code = compile_build(build, source, tmp)
        references = {ref: compile_build(ref, source, tmp) for ref in refs}
    print(f"{source}: the kernels of {build}, and the builds with the same SASS for each")
    unmatched = 0
    for name, same in matches(code, references, pattern):
        unmatched += not same
        print(f"  {', '.join(same) if same else 'NONE':40s} {name[:100]}")
    print(f"{unmatched} kernel(s) match no reference")


if __name__ == "__main__":
    main()
