"""Graph time of aotinfer.top_k (the row select kernel; a lab tool for
dev/ab_provider_builds.sh): k = 50 and 1024 over bench_sampling's flat and peaked rows of
128 and 512 x 128256 float32 and 128 x 128256 bf16, rotating inputs. Writes {case: us} and
the first rows' indices (for the same-output check) as JSON to the path given.

    python dev/time_top_k_graph.py OUT.json   (GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us, rotations  # noqa: E402
from bench_sampling import make_probs  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from time_sampling_graph import write_times  # noqa: E402

import aotinfer  # noqa: E402


def main():
    times, tokens = {}, {}
    for batch, dtype in ((128, torch.float32), (512, torch.float32), (128, torch.bfloat16)):
        for peaked in (False, True):
            size = torch.finfo(dtype).bits // 8
            sets = rotations(
                lambda i, b=batch, pk=peaked, dt=dtype: (make_probs(b, 128256, pk, i).to(dt),),
                batch * 128256 * size,
            )
            for k in (50, 1024):
                case = f"top_k {k} {batch}x128256 {dtype} {'peaked' if peaked else 'flat'}"
                times[case] = rotation_graph_us(lambda p, k=k: aotinfer.top_k(p, k), sets)
                tokens[case] = aotinfer.top_k(sets[0][0], k)[1][:4].tolist()
            del sets
            torch.cuda.empty_cache()
    write_times(sys.argv[1], times, tokens)


if __name__ == "__main__":
    main()
