"""Graph time of every sampling-family op (a lab tool): batch 1 and 16 (the cluster kernels)
and 128 and 512 (one CTA per row), vocab 32000 and 128256, bench_sampling's flat and peaked
rows, explicit seed, rotating inputs, the launcher's kernel choice. Writes {case: us} as
JSON to the path given, with the first tokens per sampler so that two builds can be checked
for the same tokens, and prints the table. LAB_VOCABS="32000 65536 ..." times other
vocabularies (e.g. for a crossover between the two); LAB_OPS="top_p ..." only those ops;
LAB_DISTS="flat peaked sharp" the row kinds (default flat and peaked; "sharp" rows are
softmax(8 x randn), whose top 50 hold nearly all the mass, as a confident model's do: joint
and top-k then top-p then need their top-p search, where the benchmark's rows keep the
top-k set whole).

    python dev/time_sampling_graph.py OUT.json [BATCH ...]   (GPU machine, provider installed)
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us, rotations  # noqa: E402
from bench_sampling import make_probs  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from sweep_sampling import CALLS, S  # noqa: E402

import aotinfer  # noqa: E402

# sweep_sampling's calls (explicit seed), the one renorm it lacks, and top-k then top-p (the
# two-search kernels' other mode).
OPS = {
    **CALLS,
    "top_k_renorm": lambda p: aotinfer.top_k_renorm_probs(p, 50),
    "top_k_first": lambda p: aotinfer.top_k_top_p_sampling_from_probs(
        p, 50, 0.9, filter_apply_order="top_k_first", **S
    ),
}


def make_rows(batch, vocab, dist, seed):
    """bench_sampling's flat or peaked rows, or sharp ones (softmax of 8 x randn)."""
    if dist not in ("flat", "peaked", "sharp"):
        raise ValueError(f"LAB_DISTS takes flat, peaked and sharp, got {dist!r}")
    if dist != "sharp":
        return make_probs(batch, vocab, dist == "peaked", seed)
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.softmax(8 * torch.randn(batch, vocab, device="cuda", generator=g), -1)


def main():
    times, tokens = {}, {}
    batches = [int(b) for b in sys.argv[2:]] or [1, 16, 128, 512]
    vocabs = [int(v) for v in os.environ.get("LAB_VOCABS", "32000 128256").split()]
    ops = {k: v for k, v in OPS.items() if k in os.environ.get("LAB_OPS", " ".join(OPS)).split()}
    dists = os.environ.get("LAB_DISTS", "flat peaked").split()
    for vocab in vocabs:
        for batch in batches:
            for dist in dists:
                sets = rotations(
                    lambda i, b=batch, v=vocab, d=dist: (make_rows(b, v, d, i),),
                    batch * vocab * 4,
                )
                for name, fn in ops.items():
                    case = f"{name} {batch}x{vocab} {dist}"
                    times[case] = rotation_graph_us(fn, sets)
                    if not name.endswith(("renorm", "mask")):
                        tokens[case] = fn(sets[0][0])[:64].tolist()
                del sets
                torch.cuda.empty_cache()
    write_times(sys.argv[1], times, tokens)


def write_times(path, times, tokens):
    """The lab JSON that dev/ab_provider_builds.sh compares ({"us": ..., "tokens": ...}), and
    the table."""
    with open(path, "w") as f:
        json.dump({"us": times, "tokens": tokens}, f)
    width = max(map(len, times), default=0)
    for case, us in times.items():
        print(f"{case:{width}s} {us:8.1f} us")


if __name__ == "__main__":
    main()
