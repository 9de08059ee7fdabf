"""A/B of the tensor-core decode's pipeline depth (AOTINFER_DECODE_STAGES 2 vs 3) on the
shapes of the decode goals, with FlashInfer's tensor-core wrapper on the same data, in one
process, each configuration timed twice in alternation (a lab tool).

    python dev/ab_decode_stages.py          (GPU machine, provider installed)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import rotation_graph_us, try_import_flashinfer  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, batch_inputs  # noqa: E402

import aotinfer  # noqa: E402

SHAPES = [(64, 4096), (16, 16384), (64, 16384), (256, 1024), (16, 1024), (1, 1024)]


def main():
    fi = try_import_flashinfer()
    for batch, kv in SHAPES:
        _, cache, indptr, indices, last, caches, q = batch_inputs(batch, kv, False)
        ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
        w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        fw = None
        if fi is not None:
            fw = fi.BatchDecodeWithPagedKVCacheWrapper(
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda"),
                "NHD",
                use_tensor_cores=True,
            )
            fw.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        res = {"2": [], "3": [], "fi": []}
        for _ in range(2):
            for st in ("2", "3"):
                os.environ["AOTINFER_DECODE_STAGES"] = st
                res[st].append(rotation_graph_us(lambda c, w=w, q=q: w.run(q, c), caches))
            del os.environ["AOTINFER_DECODE_STAGES"]
            if fw is not None:
                res["fi"].append(rotation_graph_us(lambda c, fw=fw, q=q: fw.run(q, c), caches))
        line = ", ".join(f"{k}: " + " / ".join(f"{v:.1f}" for v in vs) for k, vs in res.items())
        print(f"batch {batch:3d} kv {kv:5d} (us, two rounds) {line}", flush=True)
        del caches, cache
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
