"""A/B of the top-k search's mass atomics in plain top-k sampling (a lab tool): the default
(no masses: the draw needs only the threshold key) against AOTINFER_SAMPLING_TOP_K_MASS=1
(masses summed as before), on bench_sampling's shapes and distributions, both timed twice in
alternation in one process (graph, rotating inputs, explicit seed). Top-p is timed beside
them as an unchanged control. Tokens must be equal between the two.

    python dev/ab_sampling_top_k_mass.py          (GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us, rotations  # noqa: E402
from bench_sampling import make_probs  # noqa: E402

import aotinfer  # noqa: E402

S = dict(seed=1234, offset=0)
OPS = {
    "top_k": lambda p: aotinfer.top_k_sampling_from_probs(p, 50, **S),
    "top_p": lambda p: aotinfer.top_p_sampling_from_probs(p, 0.9, **S),
}
SWITCH = "AOTINFER_SAMPLING_TOP_K_MASS"


def main():
    for vocab in (32000, 128256):
        for batch in (1, 16, 128, 512):
            for peaked in (False, True):
                sets = rotations(lambda i: (make_probs(batch, vocab, peaked, i),), batch * vocab * 4)
                for name, fn in OPS.items():
                    res = {"no_mass": [], "mass": []}
                    toks = {}
                    for _ in range(2):
                        for cfg in res:
                            os.environ[SWITCH] = "1" if cfg == "mass" else "0"
                            toks[cfg] = fn(sets[0][0])
                            res[cfg].append(rotation_graph_us(fn, sets))
                    del os.environ[SWITCH]
                    same = bool(torch.equal(toks["no_mass"], toks["mass"]))
                    line = ", ".join(f"{k}: " + " / ".join(f"{v:.1f}" for v in vs) for k, vs in res.items())
                    dist = "peaked" if peaked else "flat"
                    print(f"{name:5s} {batch:3d} x {vocab:6d} {dist:6s} (us) {line}; same tokens: {same}",
                          flush=True)
                del sets
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
