"""Build cost of every provider wheel, and the import cost of the core.

For each provider (default: all six) this removes providers/<arch>/build (so every build is
a clean one, as in a packager's fresh checkout), times
``python -m build --wheel --no-isolation providers/<arch>`` with
CMAKE_BUILD_PARALLEL_LEVEL=2 (the 2-core budget of DESIGN.md), and records the wheel's size
and the SASS/PTX inside it (ci/fatbin_targets.py). It then times what ``import aotinfer``
adds after ``import torch``: the median of 10 fresh interpreters.

Writes benchmarks/results/build.json and build.md; wheels land in dist/.
Usage: python benchmarks/measure_build.py [arch ...] [--import-only]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PROVIDERS = ["sm75", "sm80", "sm90a", "sm100a", "sm110a", "sm120f"]
PARALLEL = "2"
GOAL_BUILD_S = 600
GOAL_WHEEL_MB = 25
GOAL_IMPORT_MS = 50
IMPORT_RUNS = 10

_spec = importlib.util.spec_from_file_location("fatbin_targets", ROOT / "ci/fatbin_targets.py")
fatbin_targets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fatbin_targets)


def _output(cmd, **kwargs) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs).stdout
    except OSError:
        return ""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _commit() -> str:
    commit = _output(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT).strip() or "unknown"
    dirty = bool(_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT))
    return commit + (" (uncommitted changes)" if dirty else "")


def machine_facts() -> dict:
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    nvcc_release = [line for line in _output([nvcc, "--version"]).splitlines() if "release" in line]
    cpu = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line]
    return {
        "date": _now(),
        "git_commit": _commit(),
        "nproc": os.cpu_count(),
        "cpu": cpu[0].split(":", 1)[1].strip() if cpu else platform.processor(),
        "nvcc": nvcc_release[0].strip() if nvcc_release else "not found",
        "cmake": (_output(["cmake", "--version"]).splitlines() or ["not found"])[0],
        "python": platform.python_version(),
        "CMAKE_BUILD_PARALLEL_LEVEL": PARALLEL,
    }


def _generator(arch: str) -> str:
    """The generator scikit-build-core chose (Ninja when one is installed), from the cache."""
    for cache in (ROOT / "providers" / arch / "build").glob("*/CMakeCache.txt"):
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("CMAKE_GENERATOR:"):
                return line.split("=", 1)[1]
    return "unknown"


def build_provider(arch: str, outdir: Path) -> dict:
    shutil.rmtree(ROOT / "providers" / arch / "build", ignore_errors=True)
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=PARALLEL)
    with tempfile.TemporaryDirectory() as stage:
        cmd = [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            stage,
            str(ROOT / "providers" / arch),
        ]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        row = {"provider": arch, "build_s": round(seconds, 1)}
        wheels = list(Path(stage).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            log = proc.stdout + proc.stderr
            errors = [line for line in log.splitlines() if "error" in line.lower()]
            row["error_summary"] = errors[0].strip() if errors else "no wheel produced"
            row["error"] = log[-3000:]
            return row
        wheel = Path(shutil.move(str(wheels[0]), str(outdir / wheels[0].name)))
    entries = fatbin_targets.fatbin_entries(wheel)
    row.update(
        generator=_generator(arch),
        wheel=wheel.name,
        wheel_mb=round(wheel.stat().st_size / 1e6, 2),
        sass=sorted({e["arch"] for e in entries if e["kind"] == "ELF"}),
        ptx=sorted({e["arch"] for e in entries if e["kind"] == "PTX"}),
        all_compressed=all(e["compressed"] for e in entries),
    )
    return row


def import_ms() -> dict:
    # Time only the aotinfer import; torch is already loaded, as in any real user program.
    # CPU time is reported too: it is what the import costs even on a busy machine.
    code = (
        "import time, torch; t = time.perf_counter(); c = time.process_time(); import aotinfer; "
        "print(time.perf_counter() - t, time.process_time() - c, aotinfer.__file__)"
    )
    samples, cpu, where = [], [], ""
    for _ in range(IMPORT_RUNS):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=tempfile.gettempdir(),
        ).stdout.split()
        samples.append(float(out[0]) * 1e3)
        cpu.append(float(out[1]) * 1e3)
        where = out[2]
    return {
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "cpu_median_ms": round(statistics.median(cpu), 1),
        "runs": IMPORT_RUNS,
        "module": where,
        "date": _now(),
        "git_commit": _commit(),
        "load_average_1min": round(os.getloadavg()[0], 1),
    }


def markdown(result: dict) -> str:
    def ok(value, goal):
        return "yes" if value <= goal else "**no**"

    m = result["machine"]
    lines = [
        "# Provider build cost",
        "",
        "Written by `benchmarks/measure_build.py`: a clean `python -m build --wheel "
        f"--no-isolation providers/<arch>` per provider, CMAKE_BUILD_PARALLEL_LEVEL={PARALLEL}. "
        f"Goals (DESIGN.md): build <= {GOAL_BUILD_S // 60} min and wheel <= {GOAL_WHEEL_MB} MB "
        f"per provider, `import aotinfer` <= {GOAL_IMPORT_MS} ms.",
        "",
        "| provider | build s | <= 10 min | wheel MB | <= 25 MB | SASS | PTX | compressed |",
        "|---|---:|---|---:|---|---|---|---|",
    ]
    failures = []
    for r in result["providers"]:
        if "error" in r:
            lines.append(f"| {r['provider']} | {r['build_s']} | build FAILED | | | | | |")
            failures.append(f"- {r['provider']} failed: `{r['error_summary']}`")
            continue
        lines.append(
            f"| {r['provider']} | {r['build_s']} | {ok(r['build_s'], GOAL_BUILD_S)} "
            f"| {r['wheel_mb']} | {ok(r['wheel_mb'], GOAL_WHEEL_MB)} | {' '.join(r['sass'])} "
            f"| {' '.join(r['ptx']) or 'none'} | {'yes' if r['all_compressed'] else 'no'} |"
        )
    imp = result["import_aotinfer"]
    lines += ["", *failures] if failures else []
    lines += [
        "",
        f"`import aotinfer` after `import torch`: median {imp['median_ms']} ms "
        f"(min {imp['min_ms']}, max {imp['max_ms']}, CPU time median {imp['cpu_median_ms']} ms; "
        f"{imp['runs']} fresh interpreters; "
        f"goal <= {GOAL_IMPORT_MS} ms: {ok(imp['median_ms'], GOAL_IMPORT_MS)}). "
        f"Measured {imp['date']} at {imp['git_commit']}, 1-min load average "
        f"{imp['load_average_1min']}, importing {imp['module']}.",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in m.items()],
        "",
        "The SASS column is read from each wheel's `.nv_fatbin` by `ci/fatbin_targets.py`; "
        "the a/f suffix comes from fatbin flag bits found by experiment with nvcc 13.0.",
        "",
    ]
    return "\n".join(lines)


def build_all(archs) -> tuple:
    outdir = ROOT / "dist"
    outdir.mkdir(exist_ok=True)
    load_before = os.getloadavg()[0]  # a busy (shared) machine inflates every time below
    rows = []
    for arch in archs:
        print(f"building {arch} ...", flush=True)
        rows.append(build_provider(arch, outdir))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "error"}), flush=True)
        if "error" in rows[-1]:
            print(rows[-1]["error"], file=sys.stderr)
    machine = machine_facts()
    machine["generator"] = next((r["generator"] for r in rows if "generator" in r), "unknown")
    load_after = os.getloadavg()[0]
    machine["load_average_1min"] = f"{load_before:.1f} before builds, {load_after:.1f} after"
    return rows, machine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", help=f"providers (default: {' '.join(PROVIDERS)})")
    parser.add_argument(
        "--import-only",
        action="store_true",
        help="re-measure only the import time; keep the build rows of the existing build.json",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.archs) - set(PROVIDERS))
    if unknown:
        parser.error(f"unknown provider(s) {', '.join(unknown)}; valid: {', '.join(PROVIDERS)}")
    if args.import_only:
        old = json.loads((RESULTS / "build.json").read_text())
        rows, machine = old["providers"], old["machine"]
    else:
        rows, machine = build_all(args.archs or PROVIDERS)
    imports = import_ms()
    result = {"machine": machine, "providers": rows, "import_aotinfer": imports}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "build.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "build.md").write_text(markdown(result))
    print(markdown(result))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
