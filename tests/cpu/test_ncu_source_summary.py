"""dev/ncu_source_summary.py on a small source-page CSV of the shape Nsight Compute writes:
runs of equally often executed lines, predicates and modifiers dropped from opcodes, the
repeated page of a kernel read once, stall reasons and the hottest lines."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "ncu_source_summary", ROOT / "dev" / "ncu_source_summary.py"
)
tool = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tool  # (its dataclasses look their module up there)
spec.loader.exec_module(tool)

HEADER = '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"'


def page(name, lines):
    out = [f'"Kernel Name","{name}",', HEADER]
    out += [
        f'"0x{i:x}","      {sass}","{samples}","{executed}"'
        for i, (sass, samples, executed) in enumerate(lines)
    ]
    return out


BODY = [
    ("LDC R1, c[0x0][0x28]", 1, 10),
    ("@P0 ISETP.GE.AND P1, PT, R2, R3, PT", 5, 300),
    ("ATOMS.ADD RZ, [R4], R5", 7, 300),
    ("BRA 0x40", 0, 300),
    ("EXIT", 0, 10),
]


def test_runs_counts_and_opcodes():
    lines = ["==PROF== noise"] + page("k<1>", BODY) + page("k<1>", BODY) + page("k<2>", BODY[:1])
    kernels = tool.read_kernels(lines)
    assert [k.name for k in kernels] == ["k<1>", "k<2>"]
    k = kernels[0]
    assert [(r.executed, r.opcodes) for r in k.runs] == [
        (10, ["LDC"]),
        (300, ["ISETP", "ATOMS", "BRA"]),
        (10, ["EXIT"]),
    ]
    assert k.executed == 10 + 900 + 10 and k.samples == 13
    text = tool.summary(k)
    assert "300 x    3 instructions" in text and "ATOMS 1" in text


REASONS_HEADER = HEADER + ',"stall_long_sb","stall_wait","stall_wait (Not Issued)"'


def test_stall_reasons_and_hot_lines():
    body = [
        ("LDG.E R2, [R4]", 2, 10, 0, 2, 9),
        ("HMMA.16816.F32 R8, R4, R6, R8", 6, 10, 1, 5, 9),
        ("EXIT", 0, 10, 0, 0, 0),
    ]
    lines = ['"Kernel Name","k<3>",', REASONS_HEADER]
    for i, (sass, s, e, lsb, w, wn) in enumerate(body):
        lines.append(f'"0x{i:x}","  {sass}","{s}","{e}","{lsb}","{w}","{wn}"')
    (k,) = tool.read_kernels(lines)
    assert [(x.sass, x.reasons) for x in k.lines][:2] == [
        ("LDG.E R2, [R4]", {"long_sb": 0, "wait": 2}),
        ("HMMA.16816.F32 R8, R4, R6, R8", {"long_sb": 1, "wait": 5}),
    ]
    text = tool.hot_lines(k, 1).splitlines()
    assert text[0] == "  stall reasons: wait 87.5% long_sb 12.5%"  # the Not Issued column left out
    assert len(text) == 2 and "HMMA" in text[1] and "wait:5 long_sb:1" in text[1]
