"""Shared benchmark plumbing: the card's copy bandwidth, event timing over rotating inputs,
and results written as JSON plus a markdown table with card, driver, CUDA and commit."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Optional

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def copy_bandwidth_bytes_per_s(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), reps=reps, warmup=3)
    return 2 * nbytes / (ms * 1e-3)


def time_ms(fn, reps: int = 50, warmup: int = 5, args_list=None) -> float:
    """Median milliseconds of fn(*args) over reps, with CUDA events; args rotate over
    args_list so repeated calls do not measure the L2 cache."""
    args_list = args_list or [()]
    for i in range(warmup):
        fn(*args_list[i % len(args_list)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = args_list[i % len(args_list)]
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_time_ms(fn, reps: int = 50, calls: int = 1, args_list=None) -> float:
    """Median milliseconds per call of fn in CUDA-graph replay.

    ``calls`` > 1 captures that many calls back to back in one graph (``fn(*args)`` with
    args rotating over ``args_list``, so consecutive calls need not hit the L2 cache) and
    divides a replay's time by ``calls``: the per-call time of a sequence of kernels, as a
    serving loop runs them, without the host's graph-launch latency (on the H200 host a
    replay of a one-kernel graph measures 12-18 us from the start event). ``calls`` = 1 is
    one call per replay, launch latency included."""
    args_list = args_list or [()]
    fn(*args_list[0])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(*args_list[i % len(args_list)])
    return time_ms(graph.replay, reps=reps, warmup=3) / calls


def host_us(fn, n: int = 300, hold_gpu: bool = False, sleep_cycles: int = 2_000_000_000) -> float:
    """CPU microseconds per call of fn, the GPU keeping up (or, ``hold_gpu``, held busy by a
    sleep kernel of ``sleep_cycles`` first (2e9: ~1 s), so that every call only enqueues;
    it must outlast the n calls)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    if hold_gpu:
        torch.cuda._sleep(sleep_cycles)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return dt * 1e6


def warm_up_host(seconds: float = 3.0) -> None:
    """Keeps the host busy launching small kernels for a few seconds before host time is
    measured: on the H200 machine the first shape of a process read 30-60% slower in every
    part, torch's own allocation included, than the same parts later (dev/NOTES.md item 41)."""
    x = torch.zeros(4, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            x.add_(1)
        torch.cuda.synchronize()


def busy_host_us(fn) -> float:
    """One round of host_us for an eager call: 200 calls enqueued behind a ~0.2 s sleep
    kernel, so each call's CPU time is measured without the GPU in the way."""
    return host_us(fn, n=200, hold_gpu=True, sleep_cycles=400_000_000)


def print_host_times(parts: dict, rounds: int = 3) -> None:
    """Prints each part's host time (busy_host_us): the median of ``rounds`` rounds, the
    rounds interleaved across the parts so that a slow spell of the host does not land on
    one part, with the range."""
    times = {name: [] for name in parts}
    for _ in range(rounds):
        for name, fn in parts.items():
            times[name].append(busy_host_us(fn))
    for name, ts in times.items():
        print(f"{statistics.median(ts):8.2f}  ({min(ts):6.2f}-{max(ts):6.2f})  {name}", flush=True)


def rotation_graph_us(fn, sets, min_calls: int = 10) -> float:
    """Per-call microseconds of fn(*set) in a CUDA graph of at least ``min_calls`` calls, a
    whole number of rounds over ``sets`` (see graph_time_ms)."""
    calls = -(-min_calls // len(sets)) * len(sets)
    return 1e3 * graph_time_ms(fn, calls=calls, args_list=sets)


def graph_floor_us() -> dict:
    """A one-kernel graph (a 4-byte add) timed both ways graph_time_ms can: what launch
    latency adds to a single replay, and the per-call floor inside a 10-call graph."""
    tiny = torch.zeros(1, device="cuda")
    return {
        "one-kernel graph, 1 call per replay (us)": round(
            1e3 * graph_time_ms(lambda: tiny.add_(1)), 2
        ),
        "one-kernel graph, per call of 10 (us)": round(
            1e3 * graph_time_ms(lambda: tiny.add_(1), calls=10), 2
        ),
    }


def sm_clock_mhz(cycles: int = 20_000_000) -> float:
    """The SM clock a busy kernel runs at (MHz): torch.cuda._sleep spins for `cycles` of
    clock64, timed by events. Kernels bound by chains of barriers scale with it, those bound
    by memory latency less, so two cards' records are read beside it."""
    torch.cuda._sleep(cycles // 10)  # out of idle clocks first
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (1e3 * start.elapsed_time(end))


def rotations(make, total_bytes_per_set: int, budget: int = 512 << 20):
    """Enough input sets (from make(i)) that one pass over them overflows the L2 cache."""
    n = max(2, min(16, budget // max(1, total_bytes_per_set)))
    return [make(i) for i in range(n)]


def environment(copy_bw: Optional[float] = None) -> dict:
    """The machine, software and commit of a run; with ``copy_bw`` (bytes/s, measured in the
    run) also that bandwidth and the graph launch floors (graph_floor_us)."""
    props = torch.cuda.get_device_properties(0)
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=False,
            )
            .stdout.strip()
            .splitlines()[0]
        )
    except (OSError, IndexError):
        driver = "unknown"
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short=12", "HEAD"],
                capture_output=True,
                text=True,
                cwd=RESULTS.parent,
                check=False,
            ).stdout.strip()
            or "unknown"
        )
    except OSError:
        commit = "unknown"
    # The device machine's copy of the tree has no .git: ci/device-run.sh passes the commit.
    commit = os.environ.get("AOTINFER_COMMIT") or commit
    env = {
        "card": props.name,
        "multiprocessors": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if copy_bw is not None:
        env["copy_bandwidth_TB/s"] = round(copy_bw / 1e12, 3)
        env.update(graph_floor_us())
        env["sm_clock_MHz (busy, torch.cuda._sleep)"] = round(sm_clock_mhz())
    return env


def write_results(name: str, env: dict, rows: list, columns: list, notes: str = "") -> None:
    """benchmarks/results/<name>.json and <name>.md (and copies under $OUT when set)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"environment": env, "rows": rows}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    lines = [f"# {name}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    if notes:
        lines += ["", notes]
    lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in columns) + " |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    out = os.environ.get("OUT")
    if out:
        for ext in ("json", "md"):
            (Path(out) / f"{name}.{ext}").write_text((RESULTS / f"{name}.{ext}").read_text())
    print("\n".join(lines))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def try_import_flashinfer():
    """FlashInfer as a baseline, when it is importable (BASELINES.md says how to carry it)."""
    try:
        import flashinfer  # noqa: F401

        return flashinfer
    except Exception as exc:  # not installed, or its JIT cannot run here
        print(f"FlashInfer baseline unavailable: {exc}")
        return None
