"""The Python path of eager calls, timed on a machine without a GPU: the samplers, renorm
and masking at 1 x 32000 on meta tensors (they take the provider path and allocate
nothing; a no-op fake stands in for the provider's kernels), and the decode wrapper's
run() on the simulated provider of tests/cpu/decode_contract.py with a no-op prepared
launch. Best of five rounds of 20000 calls each, microseconds per call.

    python dev/time_python_paths_cpu.py                       (the installed core)
    PYTHONPATH=<other>/core python dev/time_python_paths_cpu.py   (another one, to A/B)

Only differences between two cores in one stretch of time mean anything: the host's own
speed drifts between runs.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "cpu"))

import decode_contract  # noqa: E402
from best_of import best_seconds  # noqa: E402
from test_decode_api import HKV, HQ, PS, D, make_batch, workspace  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _sampling_ops, _views  # noqa: E402


def best_us(f, n=20000) -> float:
    return best_seconds(f, n) * 1e6


class _NoKernels:
    def __getattr__(self, name):
        return lambda *args: None


class _Patch:
    def setattr(self, obj, name, value):
        setattr(obj, name, value)


def main() -> None:
    _views.check_device_supported = lambda name, t: None
    _views.stream_handle = lambda device: 0
    _sampling_ops.kernels_for = lambda device: _NoKernels()
    p = torch.empty(1, 32000, device="meta")
    cases = {
        "top_p": lambda: aotinfer.top_p_sampling_from_probs(p, 0.9, seed=1, offset=2),
        "top_k": lambda: aotinfer.top_k_sampling_from_probs(p, 50, seed=1, offset=2),
        "min_p": lambda: aotinfer.min_p_sampling_from_probs(p, 0.1, seed=1, offset=2),
        "joint": lambda: aotinfer.top_k_top_p_sampling_from_probs(
            p, 50, 0.9, filter_apply_order="joint", seed=1, offset=2
        ),
        "plain": lambda: aotinfer.sampling_from_probs(p, seed=1, offset=2),
        "top_p_renorm": lambda: aotinfer.top_p_renorm_probs(p, 0.9),
        "top_k_renorm": lambda: aotinfer.top_k_renorm_probs(p, 50),
        "top_k_mask": lambda: aotinfer.top_k_mask_logits(p, 50),
    }
    fake = decode_contract.install(_Patch())
    fake.prepare_batch_decode = lambda *args, **kwargs: _NoKernels()
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    out = torch.empty_like(q)
    cases["decode run()"] = lambda: w.run(q, cache)
    cases["decode run(out=)"] = lambda: w.run(q, cache, out=out)
    lse = torch.empty(q.shape[:2])
    cases["decode run_return_lse(out=, lse=)"] = lambda: w.run_return_lse(
        q, cache, out=out, lse=lse
    )
    print(" | ".join(f"{name} {best_us(f):.2f}" for name, f in cases.items()))


if __name__ == "__main__":
    main()
