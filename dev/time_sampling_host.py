"""Kernel lab: host time of one eager batch-1 sampling call and of its parts (the Python
checks, the generator advance, output allocation, the stream query, the provider call).

The GPU is held busy by a long ``torch.cuda._sleep`` first, so every timed call only
enqueues: the figure is CPU time per call, not kernel time. ``quick``: the calls of
bench_sampling's batch-1 eager shapes only (1 x 32000, its default arguments), no profile:
what dev/ab_core_host.sh compares between two versions of the core.

    python dev/time_sampling_host.py [quick]     (on a GPU machine, provider installed)
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import print_host_times, warm_up_host  # noqa: E402
from bench_sampling import TOP_K, cases  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _rng, _views  # noqa: E402


def bench_calls(probs: torch.Tensor) -> dict:
    """bench_sampling's eager calls on ``probs`` (its cases: default generator, its
    parameters), and top-k with ``return_valid`` and softmax."""
    calls = {name: (lambda ours=ours: ours(probs)) for name, (ours, *_) in cases(None).items()}
    calls["top_k_sampling return_valid"] = lambda: aotinfer.top_k_sampling_from_probs(
        probs, TOP_K, return_valid=True
    )
    calls["softmax"] = lambda: aotinfer.softmax(probs)
    return calls


def main() -> None:
    dev = torch.device("cuda", 0)
    if sys.argv[1:] == ["quick"]:
        warm_up_host()
        print(f"host time per call in us, GPU busy (torch {torch.__version__}), 1 x 32000")
        print_host_times(bench_calls(torch.softmax(torch.randn(1, 32000, device=dev), -1)))
        return
    probs = torch.softmax(torch.randn(1, 128256, device=dev), -1)
    gen = torch.cuda.default_generators[0]
    parts = {
        "top_k_sampling_from_probs, default generator": lambda: aotinfer.top_k_sampling_from_probs(
            probs, 50
        ),
        "top_k_sampling_from_probs, seed=, offset=": lambda: aotinfer.top_k_sampling_from_probs(
            probs, 50, seed=1, offset=0
        ),
        "top_p_sampling_from_probs, default generator": lambda: aotinfer.top_p_sampling_from_probs(
            probs, 0.9
        ),
        "sampling_from_probs, default generator": lambda: aotinfer.sampling_from_probs(probs),
        "top_k_mask_logits": lambda: aotinfer.top_k_mask_logits(probs, 50),
        "softmax": lambda: aotinfer.softmax(probs),
        "_rng.get_seed_and_offset (offset calls)": lambda: _rng.get_seed_and_offset(32, gen),
        "generator get_state + set_state": lambda: gen.set_state(gen.get_state()),
        "generator get_offset + set_offset + initial_seed": lambda: (
            gen.set_offset(gen.get_offset()),
            gen.initial_seed(),
        ),
        "torch.cuda.is_current_stream_capturing()": torch.cuda.is_current_stream_capturing,
        "torch.cuda.is_available()": torch.cuda.is_available,
        "torch.empty(1) on the GPU": lambda: torch.empty(1, dtype=torch.int32, device=dev),
        "stream query (aotinfer)": lambda: _views.stream_handle(dev),
        "torch.cuda.current_stream().cuda_stream": lambda: (
            torch.cuda.current_stream(dev).cuda_stream
        ),
        "_views.view(tensor)": lambda: _views.view(probs),
    }
    print(f"host time per call in us, GPU busy (torch {torch.__version__})")
    print_host_times(parts)
    # Where the time of a seeded top-k call goes (cProfile adds its own overhead per call).
    call = parts["top_k_sampling_from_probs, seed=, offset="]
    torch.cuda._sleep(2_000_000_000)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(500):
        call()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
