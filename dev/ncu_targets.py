"""Kernels for Nsight Compute to read counters of (a lab tool): every case is set up and
warmed up first, then called once between torch.cuda.profiler.start() and stop(), so that
`ncu --profile-from-start off` profiles exactly those launches and nothing of the setup.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
        python3 dev/ncu_targets.py [decode] [fp8] [latency] [behind] [softmax] [sampling] [renorm] \
        [cluster] [top-p] [rejection] [joint] [local] [peaked1]

Cases: batch decode 64 x 4096 (aotinfer and FlashInfer with tensor cores, same page table;
"fp8": the same in float8_e4m3fn KV),
batch decode 1 x 1024 and single decode 32768 ("latency", each with FlashInfer's), the
batch decode shapes furthest behind FlashInfer ("behind", each with FlashInfer's kernels),
softmax 128 x 128256 bf16 (rowwise, split and split_cluster pinned), top-p and top-k
sampling 128 x 128256 (bench_sampling's flat and peaked rows), ("renorm") top-k masking
and top-k / top-p renormalisation on those rows, ("cluster") the batch-1 cluster
samplers at 1 x 32000 with FlashInfer's, and ("top-p") top-p sampling at 512 rows of 32000
and 128256, flat and peaked, with FlashInfer's (the goal cases furthest from it), and
("rejection") top-p by rejection pinned in the row kernels at 128 and 512 x 32000 with
FlashInfer's, ("joint") joint top-k / top-p sampling at 512 x 128256, flat and peaked (ours
only: the kernel whose speed moved against its instruction count in dev/NOTES.md item 60), and
("local") top-k and joint sampling at 16 x 32000 flat from the local top-k lists, and
("peaked1") top-k and joint sampling at 1 x 32000 peaked with FlashInfer's (the two goal
cases still behind it).
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import try_import_flashinfer  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, paged_setup  # noqa: E402

import aotinfer  # noqa: E402


def decode_cases(fi, kv_dtype=DT):
    g = torch.Generator().manual_seed(64 * 7 + 4096)
    lens = [4096] * 64
    cache, indptr, indices, last = paged_setup(lens, g)
    cache = cache.to(kv_dtype)
    q = torch.randn(64, HQ, D, dtype=DT, device="cuda")
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD"
    )
    w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=kv_dtype)
    kind = "decode" if kv_dtype == DT else f"decode {str(kv_dtype).split('.')[-1]} KV"
    cases = [(f"aotinfer {kind} 64x4096", lambda: w.run(q, cache))]
    if fi is not None:
        fw = fi.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", use_tensor_cores=True
        )
        fw.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=kv_dtype)
        cases.append((f"flashinfer tc {kind} 64x4096", lambda: fw.run(q, cache)))
    return cases


def latency_cases(fi):
    """The latency-bound decode goals: batch 1 x 1024 (paged) and single decode 32768 (each
    with FlashInfer's tensor-core path on the same data when it is importable)."""
    g = torch.Generator().manual_seed(1 * 7 + 1024)
    cache, indptr, indices, last = paged_setup([1024], g)
    q = torch.randn(1, HQ, D, dtype=DT, device="cuda")
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD"
    )
    w.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
    qs = torch.randn(HQ, D, dtype=DT, device="cuda")
    k = torch.randn(32768, HKV, D, dtype=DT, device="cuda")
    v = torch.randn_like(k)
    cases = [
        ("aotinfer decode 1x1024", lambda: w.run(q, cache)),
        ("aotinfer single 32768", lambda: aotinfer.single_decode_with_kv_cache(qs, k, v)),
    ]
    if fi is not None:
        fw = fi.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", use_tensor_cores=True
        )
        fw.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        cases.append(("flashinfer tc decode 1x1024", lambda: fw.run(q, cache)))
        cases.append(
            (
                "flashinfer tc single 32768",
                lambda: fi.single_decode_with_kv_cache(qs, k, v, use_tensor_cores=True),
            )
        )
    return cases


BEHIND = ((16, 1, 128, 16, 1024), (32, 8, 128, 1, 4096), (16, 8, 256, 1, 4096))


def behind_wrappers(fi, group: int) -> list:
    """(name, module, wrapper keywords) of the decode wrappers compared at a BEHIND shape:
    ours, FlashInfer's tensor-core path and, where its wrapper takes the GQA group, its
    CUDA-core kernel (FlashInfer absent: ours alone)."""
    wrappers = [("aotinfer", aotinfer, {})]
    if fi is not None:
        wrappers.append(("flashinfer tc", fi, dict(use_tensor_cores=True)))
        if group not in (7, 16):  # its CUDA-core wrapper refuses these groups
            wrappers.append(("flashinfer cuda cores", fi, {}))
    return wrappers


def behind_cases(fi):
    """The batch-decode shapes furthest behind FlashInfer's faster kernel in
    bench_decode_configs (H100, 76acd15): the 16/1 shard at 16 x 1024 (0.82x), the goals'
    32/8 at 1 x 4096 (0.94x) and Gemma-3's 16/8 d256 at 1 x 4096 (0.89x), each with
    FlashInfer's tensor-core and (where its wrapper takes the group) CUDA-core kernels on the
    same page table: their kernel durations against our decode and merge kernels' say how
    much of the gap lies inside the kernels and how much between them. Nine to ten kernels
    at 17 passes each under four sections: give ncu well over 100 s (a 100 s timeout cut the
    first run after six)."""
    cases = []
    for hq, hkv, d, batch, kv in BEHIND:
        g = torch.Generator().manual_seed(batch * 7 + kv)
        cache, indptr, indices, last = paged_setup([kv] * batch, g, hkv=hkv, d=d)
        q = torch.randn(batch, hq, d, dtype=DT, device="cuda")
        args = (indptr, indices, last, hq, hkv, d, PAGE)
        tag = f"{hq}/{hkv} d{d} {batch}x{kv}"
        for name, lib, kw in behind_wrappers(fi, hq // hkv):
            buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
            w = lib.BatchDecodeWithPagedKVCacheWrapper(buf, "NHD", **kw)
            w.plan(*args, q_data_type=DT, kv_data_type=DT)
            cases.append((f"{name} {tag}", lambda w=w, q=q, c=cache: w.run(q, c)))
    return cases


def _pinned(fn, **env):
    """fn() with the provider's switches set (they are read at each call)."""

    def call():
        os.environ.update(env)
        try:
            return fn()
        finally:
            for key in env:
                del os.environ[key]

    return call


def softmax_cases():
    logits = torch.randn(128, 128256, dtype=torch.bfloat16, device="cuda") * 4
    run = lambda: aotinfer.sampling.softmax(logits)  # noqa: E731
    cases = [
        (
            "aotinfer softmax 128x128256 bf16 rowwise",
            _pinned(run, AOTINFER_SOFTMAX_KERNEL="rowwise"),
        )
    ]
    for kb in ("16", "32"):
        pin = _pinned(run, AOTINFER_SOFTMAX_KERNEL="split", AOTINFER_SOFTMAX_SPLIT_CHUNK_KB=kb)
        cases.append((f"aotinfer softmax 128x128256 bf16 split {kb} KB chunks", pin))
    pin = _pinned(run, AOTINFER_SOFTMAX_KERNEL="split_cluster")
    cases.append(("aotinfer softmax 128x128256 bf16 split_cluster (one launch)", pin))
    return cases


def sampling_cases():
    from bench_sampling import make_probs

    s = aotinfer.sampling
    kw = dict(seed=1, offset=0)
    cases = []
    for dist in ("flat", "peaked"):
        probs = make_probs(128, 128256, dist == "peaked", 0)
        cases += [
            (
                f"aotinfer top-p 0.9 {dist}",
                lambda p=probs: s.top_p_sampling_from_probs(p, 0.9, **kw),
            ),
            (f"aotinfer top-k 50 {dist}", lambda p=probs: s.top_k_sampling_from_probs(p, 50, **kw)),
        ]
    return cases


def cluster_cases(fi):
    """Batch 1 x 32000 (the cluster kernels, one cluster of 8 CTAs; bench_sampling's flat
    row): top-p, top-k, min-p and plain sampling, and FlashInfer's top-p and min-p on the
    same row, where FlashInfer is 2.6x / 1.15x faster (results/sampling.md)."""
    from bench_sampling import make_probs

    s = aotinfer.sampling
    kw = dict(seed=1, offset=0)
    probs = make_probs(1, 32000, False, 0)
    cases = [
        ("aotinfer top-p 0.9 1x32000", lambda: s.top_p_sampling_from_probs(probs, 0.9, **kw)),
        ("aotinfer top-k 50 1x32000", lambda: s.top_k_sampling_from_probs(probs, 50, **kw)),
        ("aotinfer min-p 0.1 1x32000", lambda: s.min_p_sampling_from_probs(probs, 0.1, **kw)),
        ("aotinfer plain 1x32000", lambda: s.sampling_from_probs(probs, **kw)),
    ]
    if fi is not None:
        top_p, min_p = fi.sampling.top_p_sampling_from_probs, fi.sampling.min_p_sampling_from_probs
        cases += [
            ("flashinfer top-p 0.9 1x32000", lambda: top_p(probs, 0.9, **kw)),
            ("flashinfer min-p 0.1 1x32000", lambda: min_p(probs, 0.1, **kw)),
        ]
    return cases


def top_p_cases(fi):
    """Top-p sampling at 512 x 32000 and 512 x 128256 (bench_sampling's flat and peaked rows;
    the row kernels at two CTAs per SM), ours and FlashInfer's on the same rows: 0.64-0.97x
    FlashInfer's speed at afb2642 (results/sampling.md)."""
    from bench_sampling import make_probs

    kw = dict(seed=1, offset=0)
    libs = [("aotinfer", aotinfer.sampling.top_p_sampling_from_probs)]
    if fi is not None:
        libs.append(("flashinfer", fi.sampling.top_p_sampling_from_probs))
    cases = []
    for vocab in (32000, 128256):
        for dist in ("flat", "peaked"):
            probs = make_probs(512, vocab, dist == "peaked", 0)
            for lib, fn in libs:
                call = lambda p=probs, f=fn: f(p, 0.9, **kw)  # noqa: E731
                cases.append((f"{lib} top-p 0.9 512x{vocab} {dist}", call))
    return cases


def rejection_cases(fi):
    """Top-p sampling by rejection in the one-CTA-per-row kernels, pinned
    (AOTINFER_SAMPLING_TOP_P=rejection), at 128 x 32000 flat and peaked (one CTA of 1024
    threads a SM; 28-30 us against FlashInfer's 25 in session 39) and 512 x 32000 flat (two
    CTAs of 512 a SM), with FlashInfer's on the same rows."""
    from bench_sampling import make_probs

    kw = dict(seed=1, offset=0)
    top_p = aotinfer.sampling.top_p_sampling_from_probs
    cases = []
    for batch, dist in ((128, "flat"), (128, "peaked"), (512, "flat")):
        probs = make_probs(batch, 32000, dist == "peaked", 0)
        call = _pinned(lambda p=probs: top_p(p, 0.9, **kw), AOTINFER_SAMPLING_TOP_P="rejection")
        cases.append((f"aotinfer rejection top-p 0.9 {batch}x32000 {dist}", call))
        if fi is not None:
            fn = fi.sampling.top_p_sampling_from_probs
            call = lambda p=probs, f=fn: f(p, 0.9, **kw)  # noqa: E731
            cases.append((f"flashinfer top-p 0.9 {batch}x32000 {dist}", call))
    return cases


def joint_cases():
    """Joint top-k / top-p sampling at 512 x 128256 with bench_sampling's rows and
    parameters (the two-search row kernel at two CTAs per SM)."""
    from bench_sampling import TOP_K, TOP_P, make_probs

    s = aotinfer.sampling
    kw = dict(seed=1, offset=0, filter_apply_order="joint")
    cases = []
    for dist in ("flat", "peaked"):
        probs = make_probs(512, 128256, dist == "peaked", 0)
        call = lambda p=probs: s.top_k_top_p_sampling_from_probs(p, TOP_K, TOP_P, **kw)  # noqa: E731
        cases.append((f"aotinfer joint top-k {TOP_K} top-p {TOP_P} 512x128256 {dist}", call))
    return cases


def local_list_cases():
    """The cluster samplers that draw from the CTAs' local top-k lists
    (cluster_local_top_k.cuh), 16 x 32000 flat with bench_sampling's parameters: top-k alone
    and joint top-k / top-p, whose difference (about 4.5 us in dev/NOTES.md item 63's A/B)
    is the joint path's own cost."""
    from bench_sampling import TOP_K, TOP_P, make_probs

    s = aotinfer.sampling
    kw = dict(seed=1, offset=0)
    probs = make_probs(16, 32000, False, 0)
    joint = s.top_k_top_p_sampling_from_probs
    return [
        (
            f"aotinfer top-k {TOP_K} 16x32000",
            lambda: s.top_k_sampling_from_probs(probs, TOP_K, **kw),
        ),
        (
            f"aotinfer joint top-k {TOP_K} top-p {TOP_P} 16x32000",
            lambda: joint(probs, TOP_K, TOP_P, filter_apply_order="joint", **kw),
        ),
    ]


def peaked_one_row_cases(fi):
    """The two goal samplers still behind FlashInfer: top-k and joint top-k / top-p at
    1 x 32000 on bench_sampling's peaked row (0.936x / 0.706x at b5695fa), ours (the cluster
    kernels from the local lists) and FlashInfer's on the same row."""
    from bench_sampling import TOP_K, TOP_P, make_probs

    kw = dict(seed=1, offset=0)
    probs = make_probs(1, 32000, True, 0)
    cases = []
    for who, s in (("aotinfer", aotinfer.sampling), ("flashinfer", getattr(fi, "sampling", None))):
        if s is None:
            continue
        joint = s.top_k_top_p_sampling_from_probs
        cases += [
            (
                f"{who} top-k {TOP_K} 1x32000 peaked",
                lambda s=s: s.top_k_sampling_from_probs(probs, TOP_K, **kw),
            ),
            (
                f"{who} joint top-k {TOP_K} top-p {TOP_P} 1x32000 peaked",
                lambda j=joint: j(probs, TOP_K, TOP_P, filter_apply_order="joint", **kw),
            ),
        ]
    return cases


def renorm_cases():
    """The renormalisation / masking goal shape: 128 x 128256, bench_sampling's rows."""
    from bench_sampling import make_probs

    s = aotinfer.sampling
    cases = []
    for dist in ("flat", "peaked"):
        probs = make_probs(128, 128256, dist == "peaked", 0)
        cases += [
            (f"aotinfer top-k mask 50 {dist}", lambda p=probs: s.top_k_mask_logits(p, 50)),
            (f"aotinfer top-k renorm 50 {dist}", lambda p=probs: s.top_k_renorm_probs(p, 50)),
            (f"aotinfer top-p renorm 0.9 {dist}", lambda p=probs: s.top_p_renorm_probs(p, 0.9)),
        ]
    return cases


def main():
    want = set(sys.argv[1:]) or {"decode", "softmax", "sampling"}
    cases = []
    if "decode" in want:
        cases += decode_cases(try_import_flashinfer())
    if "fp8" in want:
        cases += decode_cases(try_import_flashinfer(), torch.float8_e4m3fn)
    if "latency" in want:
        cases += latency_cases(try_import_flashinfer())
    if "behind" in want:
        cases += behind_cases(try_import_flashinfer())
    if "softmax" in want:
        cases += softmax_cases()
    if "sampling" in want:
        cases += sampling_cases()
    if "renorm" in want:
        cases += renorm_cases()
    if "cluster" in want:
        cases += cluster_cases(try_import_flashinfer())
    if "top-p" in want:
        cases += top_p_cases(try_import_flashinfer())
    if "rejection" in want:
        cases += rejection_cases(try_import_flashinfer())
    if "joint" in want:
        cases += joint_cases()
    if "local" in want:
        cases += local_list_cases()
    if "peaked1" in want:
        cases += peaked_one_row_cases(try_import_flashinfer())
    for _, fn in cases:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in cases:
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("profiled:", ", ".join(name for name, _ in cases))


if __name__ == "__main__":
    main()
