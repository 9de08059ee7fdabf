"""dev/ab_env_switch.sh (a lab tool for the GPU machine) with a stand-in timing script on
the CPU: each side of the A/B runs with its own value of the switch, and the comparison
reports B / A and flags tokens that differ."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE = """
import json, os, sys
on = os.environ["AOTINFER_FAKE_SWITCH"] == "on"
json.dump({"us": {"op 1x2 flat": 8.0 if on else 10.0},
           "tokens": {"op 1x2 flat": [1, 3] if on and sys.argv[2] == "differ" else [1, 2]}},
          open(sys.argv[1], "w"))
"""


def run_ab(tmp_path, mode):
    script = tmp_path / "fake_timing.py"
    script.write_text(FAKE)
    return subprocess.run(
        [
            "bash",
            str(ROOT / "dev" / "ab_env_switch.sh"),
            "AOTINFER_FAKE_SWITCH",
            "off",
            "on",
            str(script),
            mode,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_each_side_gets_its_value_and_the_ratio_is_b_over_a(tmp_path):
    out = run_ab(tmp_path, "same")
    assert "A: AOTINFER_FAKE_SWITCH=off  B: AOTINFER_FAKE_SWITCH=on" in out
    assert "B/A 0.800" in out and "TOKENS DIFFER" not in out


def test_different_tokens_are_flagged(tmp_path):
    assert "TOKENS DIFFER" in run_ab(tmp_path, "differ")


# dev/ab_core_host.sh: side A imports the core under BASE, side B this checkout's core/.
FAKE_HOST = """
import aotinfer
b = aotinfer.__file__.startswith({core!r})
print("   {{:.2f}}  (  1.00- 30.00)  top_k_sampling_from_probs".format(9.0 if b else 12.0))
"""


def test_core_ab_runs_each_side_on_its_core(tmp_path):
    base = tmp_path / "base"
    (base / "aotinfer").mkdir(parents=True)
    (base / "aotinfer" / "__init__.py").write_text("")
    script = tmp_path / "fake_host.py"
    script.write_text(FAKE_HOST.format(core=str(ROOT / "core")))
    out = subprocess.run(
        ["bash", str(ROOT / "dev" / "ab_core_host.sh"), str(base), str(script)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"A: {base}  B: {ROOT / 'core'}" in out
    assert "   12.00     9.00   0.750  top_k_sampling_from_probs" in out


# dev/ab_winner.py: the wheel a same-call benchmark should run on, from B/A lines only.
COMPARISON = """A: -  B: -DLAB  (us per call, two processes each, A B A B)
top_k_mask 128x128256 flat         A    56.9    57.3  B    54.7    54.5  B/A 0.956
top_k_mask 128x128256 peaked       A    55.9    55.9  B    53.9    53.8  B/A 0.964
top_k_renorm 128x128256 flat       A    63.7    63.7  B    66.0    66.1  B/A 1.036
top_k_mask 128x128256 flat               57.3 us
"""


def pick(tmp_path, *args):
    path = tmp_path / "ab.txt"
    path.write_text(COMPARISON)
    return subprocess.run(
        ["python3", str(ROOT / "dev" / "ab_winner.py"), str(path), *args],
        capture_output=True,
        text=True,
    )


def test_the_winner_follows_the_mean_of_the_matching_b_over_a_lines(tmp_path):
    # The timing line ("57.3 us") does not count: two mask lines, mean 0.960.
    assert pick(tmp_path, "top_k_mask 128x128256", "0.985", "2").stdout.strip() == "b"
    assert pick(tmp_path, "top_k_(mask|renorm) 128x128256", "0.985", "3").stdout.strip() == "a"


def test_a_pattern_that_matches_no_comparison_is_an_error(tmp_path):
    result = pick(tmp_path, "top_p_renorm")
    assert result.returncode != 0 and "0 B/A lines match" in result.stderr
    assert pick(tmp_path, "top_k_mask", "0.985", "3").returncode != 0  # 2 found, 3 expected


# dev/ab_provider_labs.sh in a scratch copy of dev/ (and ci/provider-arch.sh), with a python3
# shim on PATH that builds and installs nothing: the order of the processes, one wheel per
# lab, the per-lab comparison files and tests, and A installed last.
SHIM = """#!/usr/bin/env bash
if [ "$1" = "-c" ]; then echo sm90a; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ] && [ "$3" = "wheel" ]; then
  for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = "-w" ]; then j=$((i + 1)); touch "${!j}/aotinfer_sm90a-0-py3-none-any.whl"; fi
  done
  echo "$CMAKE_ARGS" >> "$SHIM_LOG"; exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "install ${@: -1}" >> "$SHIM_LOG"; exit 0; fi
if [ "${1##*/}" = fake_timing.py ]; then echo "run $(tail -n 1 "$SHIM_LOG")" >> "$SHIM_LOG"; fi
exec "$REAL_PYTHON" "$@"
"""

FAKE_LAB_TIMING = """
import json, sys
json.dump({"us": {"op 1x2 flat": 10.0}, "tokens": {}}, open(sys.argv[1], "w"))
"""


def run_lab_script(tmp_path, script, args, shims, copies=(), **env):
    """Runs dev/SCRIPT from a scratch copy of it, dev/build_lab_wheels.sh, COPIES and
    ci/provider-arch.sh, with a dist/ wheel, the SHIMS ({tool: text}) first on PATH and LABS
    "LAB_X LAB_Y": (stdout, the shim log's lines)."""
    import shutil
    import sys

    for name in (f"dev/{script}", "dev/build_lab_wheels.sh", "ci/provider-arch.sh", *copies):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "aotinfer_sm90a-0-cp312-linux_x86_64.whl").touch()
    shim = tmp_path / "shim"
    shim.mkdir()
    for tool, text in shims.items():
        (shim / tool).write_text(text)
        (shim / tool).chmod(0o755)
    log = tmp_path / "shim.log"
    env = {
        "PATH": f"{shim}:/usr/bin:/bin",
        "REAL_PYTHON": sys.executable,
        "SHIM_LOG": str(log),
        "OUT": str(tmp_path / "out"),
        "LABS": "LAB_X LAB_Y",
        **env,
    }
    command = ["bash", str(tmp_path / "dev" / script), *args]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    return out, log.read_text().split("\n")


def test_provider_labs_runs_every_lab_against_one_build_of_a(tmp_path):
    timing = tmp_path / "fake_timing.py"
    timing.write_text(FAKE_LAB_TIMING)
    out, events = run_lab_script(
        tmp_path,
        "ab_provider_labs.sh",
        [str(timing), "128"],
        {"python3": SHIM},
        copies=["dev/compare_graph_times.py"],
        LAB_TESTS="echo tests-ran",
    )
    assert events[:2] == ["-DCMAKE_CUDA_FLAGS=-DLAB_X", "-DCMAKE_CUDA_FLAGS=-DLAB_Y"]
    runs = [e.split("/")[-2] for e in events if e.startswith("run install")]
    assert runs == ["a", "LAB_X", "LAB_Y", "a", "LAB_X", "LAB_Y"]
    assert [e for e in events if e.startswith("install")][-1].split("/")[-2] == "a"
    assert out.split("\n").count("tests-ran") == 2 and out.count("B/A 1.000") == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ab-LAB_X.txt", "ab-LAB_Y.txt"]
    assert "tests-ran" in (tmp_path / "out" / "ab-LAB_Y.txt").read_text()  # kept beside the times


# dev/ncu_labs.sh the same way, with an ncu stand-in that logs which wheel was installed when
# it ran and writes one kernel report line.
NCU_SHIM = """#!/usr/bin/env bash
echo "ncu $(grep '^install' "$SHIM_LOG" | tail -n 1) args ${@: -1}" >> "$SHIM_LOG"
echo "  sample_kernel (512, 1, 1)x(512, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"
"""


def test_ncu_labs_profiles_the_default_and_each_lab_build(tmp_path):
    shims = {"python3": SHIM, "ncu": NCU_SHIM}
    out, events = run_lab_script(tmp_path, "ncu_labs.sh", ["joint"], shims)
    assert events[:2] == ["-DCMAKE_CUDA_FLAGS=-DLAB_X", "-DCMAKE_CUDA_FLAGS=-DLAB_Y"]
    profiled = [e.split("/")[-2] for e in events if e.startswith("ncu install")]
    assert profiled == ["default", "LAB_X", "LAB_Y"]
    assert all(e.endswith("args joint") for e in events if e.startswith("ncu"))
    assert [e for e in events if e.startswith("install")][-1].split("/")[-2] == "default"
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["ncu-LAB_X.txt", "ncu-LAB_Y.txt", "ncu-default.txt"]
    assert out.count("1 kernel reports") == 3


SASS = """
        .text._Z1kPj:
        /*0000*/                   S2R R9, SR_TID.X ;
.L_x_1:
        /*0010*/                   BSSY B1, `(.L_x_2) ;
        /*0020*/              @!P0 BRA `(.L_x_2) ;
        /*0030*/                   S2UR UR5, SR_CgaCtaId ;
        /*0040*/                   ATOMS.POPC.INC.32 RZ, [R0+UR4] ;
.L_x_2:
        /*0050*/                   BSYNC B1 ;
        /*0060*/              @!P1 BRA `(.L_x_1) ;
        /*0070*/                   EXIT ;
        .text._Z2k2Pj:
.L_x_3:
        /*0000*/                   ATOMS.POPC.INC.32 RZ, [R0+URZ] ;
        /*0010*/                   ATOMS.POPC.INC.32 RZ, [R1+URZ] ;
        /*0020*/              @!P0 BRA `(.L_x_3) ;
"""


def test_sass_loops_finds_each_backward_branch_and_counts_its_body():
    """dev/sass_loops.py: a loop is a backward branch and the code from its target label; a
    forward branch is not one. Its summary counts the opcode and the branchy overhead."""
    import sys

    sys.path.insert(0, str(ROOT / "dev"))
    import sass_loops

    found = sass_loops.loops(SASS)
    assert list(found) == ["_Z1kPj", "_Z2k2Pj"]
    ((start, end, body),) = found["_Z1kPj"]
    assert (start, end, len(body)) == (0x10, 0x60, 6)
    assert sass_loops.summary(body, "ATOMS.POPC.INC") == (
        "6 instructions, 1 ATOMS.POPC.INC (6.0 per), BSSY 1, BRA 2, S2UR 1"
    )
    assert sass_loops.report(SASS, "k2", "ATOMS.POPC.INC", 2) == [
        "  _Z2k2Pj [0x0, 0x20]: 3 instructions, 2 ATOMS.POPC.INC (1.5 per), BSSY 0, BRA 1, S2UR 0"
    ]
    assert sass_loops.report(SASS, "k2", "ATOMS.POPC.INC", 3) == []
    # where a trip's global loads are issued (predicated ones included)
    trip = ["LDG.E.128 R4, [R2.64]", "IADD3 R1, R1, 1, RZ", "@P0 LDG.E.128 R8, [R6.64]"]
    assert sass_loops.summary(trip, "LDG").endswith("BSSY 0, BRA 0, S2UR 0, LDG at 0 2")


def test_sass_same_names_the_builds_whose_code_a_kernel_has():
    """dev/sass_same.py: kernels compare by instruction text with branch labels renumbered
    (a kernel's place in the cubin changes them) and runs of blanks folded; a kernel no
    reference has is listed too."""
    import sys

    sys.path.insert(0, str(ROOT / "dev"))
    import sass_same

    moved = SASS.replace(".L_x_1", ".L_x_71").replace(".L_x_2", ".L_x_72")
    changed = SASS.replace("S2R R9", "S2R R8")
    build = sass_same.kernels(moved)
    assert list(build) == ["_Z1kPj", "_Z2k2Pj"] and len(build["_Z1kPj"]) == 8
    refs = {"lab": sass_same.kernels(SASS), "default": sass_same.kernels(changed)}
    assert sass_same.matches(build, refs, "") == [
        ("_Z1kPj", ["lab"]),
        ("_Z2k2Pj", ["lab", "default"]),
    ]
    assert sass_same.matches(build, {"default": refs["default"]}, "k2") == [
        ("_Z2k2Pj", ["default"])
    ]
    assert sass_same.matches(build, {"default": refs["default"]}, "kPj")[0] == ("_Z1kPj", [])

    # nvdisasm pads an annotation to the cubin's longest line (other kernels' names set it):
    # the blanks do not count, the text does.
    def spill(pad, reg="RZ"):
        line = f"STL [R1], {reg}" + " " * pad + '(*"SpillRefill"*)'
        return f"        .text._Z1sPj:\n        /*0000*/                   {line} ;\n"

    assert sass_same.kernels(spill(3)) == sass_same.kernels(spill(40))
    assert sass_same.kernels(spill(3)) != sass_same.kernels(spill(3, "R2"))


TRACE = """LAUNCH 128x32000 flat rep 0
TRACE row 0 sm 3 g0 1000 g1 12000 end 22000 pass0 14000 rounds 1 exact 0 settled 0 at 0 0 0 0
TRACE row 1 sm 5 g0 1500 g1 21000 end 40000 pass0 14000 rounds 2 exact 1 settled 0 at 31000 0 0 0
LAUNCH 128x32000 flat rep 1
TRACE row 0 sm 3 g0 50000 g1 60000 end 24000 pass0 15000 rounds 1 exact 0 settled 0 at 0 0 0 0
"""


def test_trace_summary_reads_each_launch_and_the_cost_of_rounds(tmp_path):
    """dev/trace_rejection_rows.py --summary: spans on the global clock (ns -> us), row ends by
    rounds, round 0 after its pass and the second round of two-round rows (SM cycles)."""
    path = tmp_path / "trace.txt"
    path.write_text(TRACE)
    out = subprocess.run(
        ["python3", str(ROOT / "dev" / "trace_rejection_rows.py"), "--summary", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "== 128x32000 flat: 2 launches, span median 15.0 us, min 10.0" in out
    assert "1 round(s): 2 rows, end median 23000.0 max 24000" in out
    assert "2 round(s): 1 rows, end median 40000 max 40000" in out
    assert "round 0 after its pass 17000; 2-round rows' round 1 9000" in out
    assert "1-round rows: after the pass 8500.0 cycles" in out
    assert "slowest row per launch: 40000c r2 x1 s0, 24000c r1 x0 s0" in out


def test_time_sampling_graph_refuses_an_unknown_row_kind():
    """LAB_DISTS names row kinds; a misspelt one would have timed flat rows under its name."""
    import sys

    import pytest

    sys.path.insert(0, str(ROOT / "dev"))
    try:
        import time_sampling_graph
    finally:
        sys.path.pop(0)
    with pytest.raises(ValueError, match="LAB_DISTS takes flat, peaked and sharp, got 'shrap'"):
        time_sampling_graph.make_rows(1, 8, "shrap", 0)


def test_trace_graph_kernels_summarises_a_replays_kernel_timeline():
    """dev/trace_graph_kernels.py: kernels are read from a Chrome trace's kernel events in
    start order (other events ignored), named without namespaces and template arguments, and
    each gets its mean duration and mean gap from the previous kernel's end (negative where it
    started early); the first kernels (a warm-up call) can be skipped."""
    import sys

    sys.path.insert(0, str(ROOT / "dev"))
    import trace_graph_kernels as t

    decode = "void aotinfer::decode_tc_kernel<__nv_bfloat16, 128>(aotinfer::DecodeParams<T1, T2>)"
    merge = "void flashinfer::MergeStatesKernel<8, 16>(T5 *, float *)"
    trace = {
        "traceEvents": [
            {"cat": "kernel", "ph": "X", "name": merge, "ts": 12.0, "dur": 2.0},
            {"cat": "cuda_runtime", "ph": "X", "name": "cudaGraphLaunch", "ts": 0.0, "dur": 1.0},
            {"cat": "kernel", "ph": "X", "name": decode, "ts": 0.0, "dur": 10.0},
            {"cat": "kernel", "ph": "X", "name": decode, "ts": 13.0, "dur": 10.0},
            {"cat": "kernel", "ph": "X", "name": merge, "ts": 24.0, "dur": 2.0},
        ]
    }
    events = t.kernel_events(trace)
    assert [e[1] for e in events] == [0.0, 12.0, 13.0, 24.0]
    assert t.short_name(decode) == "decode_tc_kernel"
    assert t.short_name(merge) == "MergeStatesKernel"
    assert t.timeline_summary(events) == {
        "MergeStatesKernel": {"count": 2, "mean_us": 2.0, "mean_gap_us": 1.5},
        "decode_tc_kernel": {"count": 1, "mean_us": 10.0, "mean_gap_us": -1.0},
    }
    assert t.timeline_summary(events, skip=2) == {
        "decode_tc_kernel": {"count": 1, "mean_us": 10.0, "mean_gap_us": -1.0},
        "MergeStatesKernel": {"count": 1, "mean_us": 2.0, "mean_gap_us": 1.0},
    }


def test_bad_input_sweep_flags_accepted_unnamed_and_other_errors(capsys):
    """dev/sweep_bad_inputs.py: a replaced argument that the call accepts, that raises an
    exception other than ValueError / TypeError / NotImplementedError / AssertionError (or
    their subclasses), or whose message does not name the argument, is printed; a named
    ValueError is not."""
    import sys

    sys.path.insert(0, str(ROOT / "dev"))
    import sweep_bad_inputs as s

    def check(x):
        if x is None:
            raise KeyError("x is None")
        if isinstance(x, str):
            raise ValueError("not the argument's name")
        if isinstance(x, list):
            raise ValueError(f"x must be a number, got {x!r}")
        return x

    s.sweep("toy", check, lambda: dict(x=1.0))
    lines = capsys.readouterr().out.splitlines()
    assert "BADTYPE  toy(x=None) -> KeyError: 'x is None'" in lines
    assert "UNNAMED  toy(x=str) -> ValueError: not the argument's name" in lines
    assert "ACCEPT   toy(x=nan) -> returned" in lines
    assert not any("toy(x=list)" in line for line in lines)
    s.sweep("broken", check, lambda: dict(x=None))
    assert capsys.readouterr().out.startswith("BASE     broken: the valid call fails: KeyError")
