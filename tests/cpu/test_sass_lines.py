"""dev/sass_lines.py: an Nsight Compute SASS page joined with `nvdisasm -gi` text. The kernel
is matched to the function with its opcodes (names differ: demangled against mangled),
offsets count from the kernel's first address, CUDA headers' frames give way to the caller's
line, and DEPTH groups by the outermost frames of the inlining chain."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "dev" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


load("ncu_source_summary")
tool = load("sass_lines")

HEADER = '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"'
K = "/src/csrc/sampling/k.cuh"
H = "/usr/local/cuda/include/sm_30_intrinsics.hpp"

DISASSEMBLY = f"""
.text._Z5otherv:
        /*0000*/                   EXIT ;
.text._Z6kernelv:
	//## File "{K}", line 3
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "{H}", line 9 inlined at "{K}", line 7
	//## File "{K}", line 7 inlined at "{K}", line 20
	//## File "{K}", line 20
        /*0010*/                   SHFL.BFLY PT, R0, R3, 0x10, 0x1f ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
	//## File "{K}", line 8 inlined at "{K}", line 21
	//## File "{K}", line 21
        /*0030*/                   EXIT ;
"""

# (sass, samples, executed) at 16-byte steps from an arbitrary load address.
PAGE = [
    ("LDC R1, c[0x0][0x28]", 1, 128),
    ("SHFL.BFLY PT, R0, R3, 0x10, 0x1f", 4, 256),
    ("@!P0 BRA 0x7f0020", 0, 256),
    ("EXIT", 3, 128),
]


def csv_page():
    lines = ['"Kernel Name","void kernel()",', HEADER]
    lines += [
        f'"0x{0x7F0000 + 16 * i:x}","      {sass}","{samples}","{executed}"'
        for i, (sass, samples, executed) in enumerate(PAGE)
    ]
    return lines


def test_match_and_lines():
    functions = tool.read_functions(DISASSEMBLY.splitlines())
    kernels = tool.read_kernels(csv_page())
    assert tool.match(kernels[0], functions) == "_Z6kernelv"
    table = tool.by_line(kernels[0], functions["_Z6kernelv"])
    # The shuffle's header frame gives way to its caller, line 7; the branch keeps its chain.
    assert {where: row[:2] for where, row in table.items()} == {
        f"{K}:3": [128, 1],
        f"{K}:7": [512, 4],
        f"{K}:8": [128, 3],
    }
    assert table[f"{K}:7"][2] == {256: 2}


def test_depth_groups_by_call_path():
    functions = tool.read_functions(DISASSEMBLY.splitlines())
    kernel = tool.read_kernels(csv_page())[0]
    table = tool.by_line(kernel, functions["_Z6kernelv"], depth=2)
    assert {where: row[0] for where, row in table.items()} == {
        "sampling/k.cuh:3": 128,
        "sampling/k.cuh:7 < sampling/k.cuh:20": 512,
        "sampling/k.cuh:8 < sampling/k.cuh:21": 128,
    }
    text = tool.report(kernel, functions, 5, str(ROOT), depth=2)
    assert "0.001 M warp instructions, 8 samples" in text


def test_unmatched_kernel_is_named():
    kernel = tool.read_kernels(csv_page())[0]
    text = tool.report(kernel, tool.read_functions([".text._Z1fv:"]), 5, str(ROOT))
    assert "no disassembled function has its 4 instructions" in text


def test_reasons_per_line():
    # The page's stall_* columns: each line's samples by reason, summed per source line and
    # printed (shares of the line's samples) with --reasons.
    header = HEADER + ',"stall_long_sb","stall_mio","stall_long_sb (Not Issued)"'
    reasons = {0: (1, 0), 1: (1, 3), 2: (0, 0), 3: (3, 0)}
    lines = ['"Kernel Name","void kernel()",', header]
    lines += [
        f'"0x{0x7F0000 + 16 * i:x}","      {sass}","{samples}","{executed}",'
        f'"{reasons[i][0]}","{reasons[i][1]}","9"'
        for i, (sass, samples, executed) in enumerate(PAGE)
    ]
    functions = tool.read_functions(DISASSEMBLY.splitlines())
    kernel = tool.read_kernels(lines)[0]
    table = tool.by_line(kernel, functions["_Z6kernelv"])
    assert table[f"{K}:7"][3] == {"long_sb": 1, "mio": 3}
    assert tool.main_reasons(table[f"{K}:7"][3], 4) == "mio 75%, long_sb 25%"
    text = tool.report(kernel, functions, 5, str(ROOT), reasons=True)
    assert "stalls: long_sb 100%" in text and "stalls: mio 75%, long_sb 25%" in text
    assert "stalls" not in tool.report(kernel, functions, 5, str(ROOT))
