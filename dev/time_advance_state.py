"""Host time of the generator-state arithmetic of every sampling call (_rng.advance_state)
against the tensor-op version it replaced, in one process; writes
benchmarks/results/host_rng.md. CPU only (no GPU needed).

    python dev/time_advance_state.py
"""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

import torch

from aotinfer import _rng


def tensor_version(state: torch.Tensor, increment: int):
    """The tensor-op implementation advance_state had before, kept here as the baseline."""
    words = state.detach().cpu().contiguous().view(torch.int64).clone()
    words[1] += (int(increment) + 3) // 4 * 4
    return words.view(torch.uint8), int(words[0]), int(words[1])


def per_call_us(fn, state, n=20000):
    for _ in range(1000):
        fn(state, 128256)
    t = time.perf_counter()
    for _ in range(n):
        fn(state, 128256)
    return (time.perf_counter() - t) / n * 1e6


def main():
    state = torch.tensor([12345, 64], dtype=torch.int64).view(torch.uint8)
    assert tensor_version(state, 5)[1:] == _rng.advance_state(state, 5)[1:]
    old, new = per_call_us(tensor_version, state), per_call_us(_rng.advance_state, state)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# host_rng",
        "",
        f"- machine: {platform.machine()}, {torch.get_num_threads()} torch threads",
        f"- torch: {torch.__version__}",
        f"- commit: {commit}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "CPU time per call of the CUDA-generator state arithmetic (16-byte state,",
        "increment 128256): mean of 20000 calls after 1000 warm-up calls, both versions",
        "in this process.",
        "",
        "| version | us per call |",
        "|---|---|",
        f"| tensor ops (before) | {old:.1f} |",
        f"| Python ints, struct (aotinfer._rng.advance_state) | {new:.1f} |",
    ]
    out = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "host_rng.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
