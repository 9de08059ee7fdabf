"""Decode attention kernels against the float64 reference on fresh random inputs.

Outputs the core allocates start as NaN (conftest's autouse fixture), and so does the float
workspace, so anything the kernels fail to write shows. The parameter space (batch, kv
lengths, page size, layout, position mode, heads, head dim, dtypes, cache form) is sampled,
not crossed: every value of every axis appears in several cases.

Tolerances (max |kernel - float64 oracle| <= tol + tol * |oracle|, on the exact input
values):
- float16 output: 1e-3. One rounding of the output costs up to 2**-11 relative (4.9e-4),
  probabilities rounded to fp16 for the PV product cost about as much again.
- bfloat16 output: 8e-3. bf16 keeps 8 significant bits: one rounding of the output alone
  is up to 2**-9 (2e-3) relative, so 1e-3 is below its resolution; 8e-3 is two ulps.
- fp8 KV: the same bound times 2. Every e4m3 and e5m2 value converts exactly to fp16 and
  bf16, and the oracle reads the same fp8 values, so quantisation is not part of the error;
  the factor covers the extra k_scale / v_scale multiplications and, on the tensor-core
  kernel, probabilities rounded once to f16 for the PV product (fp16/bf16 KV carries them
  to ~16 bits there).
- LSE (float32, base 2): 1e-3 absolute and relative (its magnitude is about log2 kv_len).
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import aotinfer
from aotinfer._attention_utils import get_alibi_slopes, unpack_paged_kv_cache
from aotinfer.reference import attention as ref

DEV = "cuda"
F64 = torch.float64
TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def workspace(nbytes=128 << 20):
    # torch.empty is poisoned by the conftest fixture: the kernels may not read stale partials
    return torch.empty(nbytes, dtype=torch.uint8, device=DEV)


def make_batch(
    kv_lens,
    *,
    page_size=16,
    layout="NHD",
    hq=32,
    hkv=8,
    d=128,
    dtype=torch.float16,
    kv_dtype=None,
    q_len=1,
    seed=0,
    tuple_cache=False,
    spare_pages=7,
    q_scale=1.0,
    kv_scale=1.0,
):
    """A random paged batch with pages in random order: (q, cache, indptr, indices, last)."""
    kv_dtype = kv_dtype or dtype
    g = _gen(seed)
    pages = [-(-n // page_size) for n in kv_lens]
    total = sum(pages) + spare_pages
    indices = torch.randperm(total, generator=g, device=DEV)[: sum(pages)].to(torch.int32)
    indptr = torch.tensor([0] + pages, device=DEV).cumsum(0).to(torch.int32)
    last = torch.tensor(
        [n - (p - 1) * page_size for n, p in zip(kv_lens, pages)], dtype=torch.int32, device=DEV
    )
    shape = (total, 2, page_size, hkv, d) if layout == "NHD" else (total, 2, hkv, page_size, d)
    cache = (torch.randn(shape, generator=g, device=DEV) * kv_scale).to(kv_dtype)
    if tuple_cache:
        cache = (cache[:, 0].contiguous(), cache[:, 1].contiguous())
    q = (torch.randn((len(kv_lens) * q_len, hq, d), generator=g, device=DEV) * q_scale).to(dtype)
    return q, cache, indptr, indices, last


def oracle(q, cache, indptr, indices, last, layout="NHD", q_len=1, **params):
    k, v = unpack_paged_kv_cache(cache, layout)
    return ref.batch_decode(
        q,
        k,
        v,
        indptr,
        indices,
        last,
        kv_layout=layout,
        q_len_per_req=q_len,
        compute_dtype=F64,
        **params,
    )


def check(out, lse, want, dtype, fp8=False):
    o64, l64 = want
    tol = TOL[dtype] * (2 if fp8 else 1)
    assert not torch.isnan(out).any(), "output holds NaN (unwritten or overflow)"
    torch.testing.assert_close(out.to(F64), o64, rtol=tol, atol=tol)
    if lse is not None:
        assert not torch.isnan(lse).any()
        torch.testing.assert_close(lse.to(F64), l64, rtol=1e-3, atol=1e-3)


def check_nan_where(bad, out, lse, want, dtype):
    """NaN output and LSE at the (row, head) pairs ``bad`` (those the oracle gives NaN),
    ``check`` at every other pair."""
    assert torch.isnan(out[bad]).all() and torch.isnan(lse[bad]).all()
    good = ~bad
    check(out[good], lse[good], (want[0][good], want[1][good]), dtype)


def run_wrapper(
    q,
    cache,
    indptr,
    indices,
    last,
    *,
    dtype,
    kv_dtype=None,
    layout="NHD",
    hq=32,
    hkv=8,
    d=128,
    page_size=16,
    q_len=1,
    run_kwargs=None,
    **plan_kwargs,
):
    """Plan and run a wrapper; the geometry defaults to the feature tests' (32/8 heads, d128,
    page 16, NHD) and the KV dtype to q's."""
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout, use_tensor_cores=q_len > 1)
    w.plan(
        indptr,
        indices,
        last,
        hq,
        hkv,
        d,
        page_size,
        q_data_type=dtype,
        kv_data_type=kv_dtype or dtype,
        q_len_per_req=q_len,
        **plan_kwargs,
    )
    return w.run(q, cache, return_lse=True, **(run_kwargs or {}))


# ---------------------------------------------------------------- sampled batch decode

BATCHES = [1, 7, 64, 128]
KV_LENS = [1, 17, 512, 2048, 16384, "mixed"]
PAGE_SIZES = [1, 16, 64]
LAYOUTS = ["NHD", "HND"]
MODES = ["NONE", "ROPE_LLAMA", "ALIBI"]
HEADS = [(32, 8), (32, 4), (28, 4), (64, 8), (8, 8)]
HEAD_DIMS = [64, 128, 256]
DTYPES = [
    (torch.float16, None),
    (torch.bfloat16, None),
    (torch.float16, torch.float8_e4m3fn),
    (torch.bfloat16, torch.float8_e5m2),
    (torch.bfloat16, torch.float8_e4m3fn),
]
MAX_TOKENS = 1 << 19  # keeps the largest case near 2 GB of KV


def _sample_cases(n=30, seed=5):
    """Each axis contributes a shuffled column in which every value appears about
    n / len(axis) times, so every value is tested in different company."""
    rnd = random.Random(seed)
    axes = [BATCHES, KV_LENS, PAGE_SIZES, LAYOUTS, MODES, HEADS, HEAD_DIMS, DTYPES, [False, True]]
    columns = []
    for a in axes:
        col = (a * -(-n // len(a)))[:n]
        rnd.shuffle(col)
        columns.append(col)
    return list(zip(*columns))


def _kv_lens(batch, kv, seed):
    rnd = random.Random(seed)
    if kv == "mixed":  # one very long request among short ones
        lens = [rnd.randint(1, 300) for _ in range(batch)]
        lens[rnd.randrange(batch)] = 16384
        return lens
    while batch * kv > MAX_TOKENS:
        kv //= 8
    return [kv] * batch


def _case_id(case):
    return "-".join(str(x).replace("torch.", "").replace(" ", "") for x in case)


CASES = _sample_cases()


@pytest.fixture(params=["auto", "cuda_cores"])
def decode_kernel(request, monkeypatch):
    """Both decode kernels where both apply: "auto" takes the tensor-core kernel for fp16/bf16
    or fp8 KV without RoPE on sm_80+, "cuda_cores" pins the CUDA-core one (which otherwise
    serves only ROPE_LLAMA)."""
    monkeypatch.setenv("AOTINFER_DECODE_KERNEL", request.param)
    return request.param


@pytest.mark.parametrize("index", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_batch_decode_sampled(index, decode_kernel):
    case = CASES[index]
    batch, kv, page_size, layout, mode, (hq, hkv), d, (dtype, kv_dtype), tuple_cache = case
    kv_dtype = kv_dtype or dtype
    lens = _kv_lens(batch, kv, seed=index)
    q, cache, indptr, indices, last = make_batch(
        lens,
        page_size=page_size,
        layout=layout,
        hq=hq,
        hkv=hkv,
        d=d,
        dtype=dtype,
        kv_dtype=kv_dtype,
        seed=len(lens) + d,
        tuple_cache=tuple_cache,
    )
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        layout=layout,
        hq=hq,
        hkv=hkv,
        d=d,
        page_size=page_size,
        dtype=dtype,
        kv_dtype=kv_dtype,
        pos_encoding_mode=mode,
        rope_theta=1e4,
    )
    want = oracle(
        q,
        cache,
        indptr,
        indices,
        last,
        layout,
        pos_encoding_mode=mode,
        alibi_slopes=get_alibi_slopes(hq),
    )
    check(out, lse, want, dtype, fp8=kv_dtype in FP8)


# ---------------------------------------------------------------- features, one at a time


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cap", [1.0, 30.0])
def test_soft_cap(dtype, cap, decode_kernel):
    q, cache, indptr, indices, last = make_batch([17, 512, 2048], dtype=dtype, q_scale=4.0)
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        dtype=dtype,
        logits_soft_cap=cap,
    )
    check(out, lse, oracle(q, cache, indptr, indices, last, logits_soft_cap=cap), dtype)


@pytest.mark.parametrize("d,hq,hkv", [(64, 32, 8), (256, 16, 8)])
@pytest.mark.parametrize("cap", [1.0, 50.0])
def test_soft_cap_at_other_head_dims(d, hq, hkv, cap, decode_kernel):
    """The cap's exp2 form (decode_common.cuh soft_capped) at d64 and at Gemma-2's shape
    (16/8 heads, d256, cap 50): large logits (q_scale 4) that the cap folds, tiles both
    whole and cut by a request's end."""
    dtype = torch.float16
    q, cache, indptr, indices, last = make_batch(
        [17, 512, 2048], dtype=dtype, hq=hq, hkv=hkv, d=d, q_scale=4.0
    )
    out, lse = run_wrapper(
        q, cache, indptr, indices, last, dtype=dtype, hq=hq, hkv=hkv, d=d, logits_soft_cap=cap
    )
    check(out, lse, oracle(q, cache, indptr, indices, last, logits_soft_cap=cap), dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("window", [0, 15, 127, 4000])
def test_window_equals_decoding_the_last_keys(layout, window, decode_kernel):
    lens = [1, 100, 2048]
    q, cache, indptr, indices, last = make_batch(lens, layout=layout, page_size=16)
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        layout=layout,
        dtype=torch.float16,
        window_left=window,
    )
    k_cache, v_cache = unpack_paged_kv_cache(cache, layout)
    for b, n in enumerate(lens):
        ids = indices[indptr[b] : indptr[b + 1]]
        k, v = ref.gather_paged_kv(k_cache, v_cache, ids, n, layout)
        k, v = k[-(window + 1) :], v[-(window + 1) :]
        wo, wl = ref.attention(q[b : b + 1], k, v, compute_dtype=F64)
        check(out[b : b + 1], lse[b : b + 1], (wo, wl), torch.float16)
        kk, vv = (k, v) if layout == "NHD" else (k.transpose(0, 1), v.transpose(0, 1))
        so, sl = aotinfer.single_decode_with_kv_cache(
            q[b], kk.contiguous(), vv.contiguous(), kv_layout=layout, return_lse=True
        )
        check(so[None], sl[None], (wo, wl), torch.float16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sinks_and_lse(dtype, decode_kernel):
    q, cache, indptr, indices, last = make_batch([1, 17, 512, 16384], dtype=dtype)
    sinks = torch.randn(32, generator=_gen(3), device=DEV) * 3
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        dtype=dtype,
        run_kwargs=dict(sinks=sinks),
    )
    check(out, lse, oracle(q, cache, indptr, indices, last, sinks=sinks), dtype)


@pytest.mark.parametrize("q_len", [2, 4])
@pytest.mark.parametrize("mode", MODES)
def test_q_len_per_req(q_len, mode, decode_kernel):
    lens = [4, 17, 512, 3000, 9]
    q, cache, indptr, indices, last = make_batch(lens, q_len=q_len, dtype=torch.bfloat16)
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        dtype=torch.bfloat16,
        q_len=q_len,
        pos_encoding_mode=mode,
        window_left=200,
    )
    want = oracle(
        q,
        cache,
        indptr,
        indices,
        last,
        q_len=q_len,
        pos_encoding_mode=mode,
        window_left=200,
        alibi_slopes=get_alibi_slopes(32),
    )
    check(out, lse, want, torch.bfloat16)


@pytest.mark.parametrize("chunk", [1, 3, 8, 40, 1 << 20])
@pytest.mark.parametrize("q_len, hq", [(1, 32), (2, 32), (4, 64)])
def test_work_list_pieces_agree(chunk, q_len, hq, decode_kernel, monkeypatch):
    """Any cut of the work list gives the reference: pieces of 1 page up to none, a skewed
    batch whose requests split into different counts (merged rows next to rows the decode
    wrote itself), with a window that empties the early pieces, sinks and the LSE; 64/8
    heads with 4 query rows per request make two 16-row blocks per KV head, each with its
    own merge counter."""
    from aotinfer import _decode_plan

    real = _decode_plan.plan_work
    monkeypatch.setattr(
        _decode_plan, "plan_work", lambda *a, **k: real(*a, **dict(k, force_chunk=chunk))
    )
    lens = [5000, max(2, q_len), 16, 17, 300, 2048, 33, 700]  # each >= q_len
    dtype = torch.bfloat16
    q, cache, indptr, indices, last = make_batch(lens, q_len=q_len, hq=hq, dtype=dtype, seed=chunk)
    sinks = torch.randn(hq, generator=_gen(chunk + 1), device=DEV)
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        hq=hq,
        dtype=dtype,
        q_len=q_len,
        window_left=1500,
        run_kwargs={"sinks": sinks},
    )
    want = oracle(q, cache, indptr, indices, last, q_len=q_len, window_left=1500, sinks=sinks)
    check(out, lse, want, dtype)


@pytest.mark.parametrize("page_size", [3, 8, 12, 32, 48])
@pytest.mark.parametrize("kv_dtype", [None, torch.float8_e4m3fn])
def test_page_sizes_beyond_the_sampled_ones(page_size, kv_dtype, decode_kernel):
    """Page sizes the sampled test does not draw: 8 and 32 (powers of two: page arithmetic by
    shifts), 3 and 12 (a 16-key tile crosses pages: row by row), 48 (tiles lie in one page,
    found by division). A skewed batch, so the long request splits at page boundaries."""
    lens = [5000, 1, 16, 17, 300, 2048, 33]
    dtype = torch.bfloat16
    kv_dtype = kv_dtype or dtype
    q, cache, indptr, indices, last = make_batch(
        lens, page_size=page_size, dtype=dtype, kv_dtype=kv_dtype, seed=page_size
    )
    out, lse = run_wrapper(
        q, cache, indptr, indices, last, dtype=dtype, kv_dtype=kv_dtype, page_size=page_size
    )
    want = oracle(q, cache, indptr, indices, last)
    check(out, lse, want, dtype, fp8=kv_dtype in FP8)


@pytest.mark.parametrize("lens", [[1000], [300], [3000, 40]])
def test_request_zero_with_a_page_table_that_does_not_start_at_zero(lens):
    """The kernels read request 0's first page from indptr[0], never assume it is 0 (a
    guess that was measured, dev/NOTES.md item 44): a table that starts elsewhere (moved on
    the device after plan(), which checks only its host copy; the provider's CSR allows any
    start) gives the reference's result on the same pages. Batch 1 x 1000 runs in 8
    clustered splits, x 300 in 2-3, and [3000, 40] through a work list."""
    shift = 5
    dtype = torch.bfloat16
    q, cache, indptr, indices, last = make_batch(lens, dtype=dtype, seed=len(lens) + lens[0])
    decoy = torch.randint(0, cache.size(0), (shift,), generator=_gen(9), device=DEV).to(torch.int32)
    shifted = torch.cat([decoy, indices])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
    w.plan(indptr.clone(), shifted, last, 32, 8, 128, 16, q_data_type=dtype)
    w._plan.indptr.add_(shift)  # the device table the launch reads: now [shift, shift + n, ...]
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device=DEV)
    w.run(q, cache, out=out, lse=lse)
    check(out, lse, oracle(q, cache, indptr, indices, last), dtype)


@pytest.mark.parametrize(
    "d, hq, q_len, kv_dtype",
    [
        (128, 32, 1, None),
        (64, 32, 2, None),
        (256, 32, 4, None),  # 8 units: 16 groups at d256's 132 slots, for the 9 requests
        (128, 32, 1, torch.float8_e4m3fn),  # the fp8 ring of the tensor-core kernel
    ],
)
def test_runs_of_entries_agree(d, hq, q_len, kv_dtype, decode_kernel, monkeypatch):
    """Runs of entries forced (AOTINFER_DECODE_WORK_RUNS=always): CTAs that take the end of
    one request and the start of the next give the reference, for a skewed batch with a
    window, sinks and the LSE; a second call agrees bit for bit (its merge counters were
    left at 0)."""
    monkeypatch.setenv("AOTINFER_DECODE_WORK_RUNS", "always")
    lens = [20000, 5, 700, 3000, max(q_len, 2), 1500, 16, 9000, 333]
    dtype = torch.bfloat16
    q, cache, indptr, indices, last = make_batch(
        lens, q_len=q_len, hq=hq, d=d, dtype=dtype, kv_dtype=kv_dtype, seed=d + q_len
    )
    sinks = torch.randn(hq, generator=_gen(d), device=DEV)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
    w.plan(
        indptr,
        indices,
        last,
        hq,
        8,
        d,
        16,
        q_data_type=dtype,
        kv_data_type=kv_dtype or dtype,
        q_len_per_req=q_len,
        window_left=6000,
    )
    assert w._plan.split.work.dim() == 3 and w._plan.split.work.shape[1] > 1
    out = torch.full((q.size(0), hq, d), float("nan"), dtype=dtype, device=DEV)
    lse = torch.full((q.size(0), hq), float("nan"), device=DEV)
    w.run(q, cache, out=out, lse=lse, sinks=sinks)
    want = oracle(q, cache, indptr, indices, last, q_len=q_len, window_left=6000, sinks=sinks)
    check(out, lse, want, dtype, fp8=kv_dtype is not None)
    again, lse2 = w.run(q, cache, return_lse=True, sinks=sinks)
    torch.testing.assert_close(again, out, rtol=0, atol=0)
    torch.testing.assert_close(lse2, lse, rtol=0, atol=0)


@pytest.mark.parametrize("use_cuda_graph", [False, True])
def test_split_merge_counters_return_to_zero(use_cuda_graph, decode_kernel):
    """The last split of each (request, head) to finish merges the others and resets its
    counter: after every call all counters are 0 again, and repeated calls agree bit for bit
    (with and without the work list)."""
    lens = [5000, 40, 2048, 300]
    q, cache, indptr, indices, last = make_batch(lens, dtype=torch.float16, seed=11)
    kwargs = {}
    if use_cuda_graph:
        kwargs = dict(
            use_cuda_graph=True,
            paged_kv_indptr_buffer=indptr.clone(),
            paged_kv_indices_buffer=indices.clone(),
            paged_kv_last_page_len_buffer=last.clone(),
        )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", **kwargs)
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.float16)
    assert w._plan.split.max_splits > 1
    first = w.run(q, cache)
    for _ in range(3):
        torch.testing.assert_close(w.run(q, cache), first, rtol=0, atol=0)
        torch.cuda.synchronize()
        assert not w._arrivals.any()
    check(first, None, oracle(q, cache, indptr, indices, last), torch.float16)


@pytest.mark.parametrize("kv_dtype", FP8)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp8_kv_with_scales(kv_dtype, dtype):
    q, cache, indptr, indices, last = make_batch(
        [17, 512, 2048], layout="HND", dtype=dtype, kv_dtype=kv_dtype, kv_scale=4.0
    )
    scales = dict(q_scale=0.7, k_scale=0.25, v_scale=0.5)
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        layout="HND",
        dtype=dtype,
        kv_dtype=kv_dtype,
        run_kwargs=scales,
    )
    check(out, lse, oracle(q, cache, indptr, indices, last, "HND", **scales), dtype, fp8=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_extreme_logits_have_no_nan(dtype, decode_kernel):
    # logits of order 1e4: any exp without the running max overflows
    q, cache, indptr, indices, last = make_batch(
        [1, 17, 2048], dtype=dtype, q_scale=30.0, kv_scale=30.0
    )
    out, lse = run_wrapper(
        q,
        cache,
        indptr,
        indices,
        last,
        dtype=dtype,
    )
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    o64, l64 = oracle(q, cache, indptr, indices, last)
    torch.testing.assert_close(out.to(F64), o64, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(lse.to(F64), l64, rtol=1e-4, atol=0.5)  # |lse| ~ 1e4


def test_non_contiguous_q_and_given_outputs():
    q, cache, indptr, indices, last = make_batch([17, 512, 1])
    qkv = torch.randn(3, 32 + 16, 128, device=DEV).half()
    qkv[:, :32] = q
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, 32, 8, 128, 16)
    out = torch.full((3, 32, 128), float("nan"), dtype=torch.float16, device=DEV)
    lse = torch.full((3, 32), float("nan"), device=DEV)
    res = w.run(qkv[:, :32], cache, out=out, lse=lse, return_lse=True)
    assert res[0] is out and res[1] is lse
    check(out, lse, oracle(q, cache, indptr, indices, last), torch.float16)


@pytest.mark.parametrize("lens", [[1000], [17, 3000, 40, 1]])
def test_prepared_launch_equals_the_full_call(lens, monkeypatch):
    """run()'s prepared launch (the default) gives bit for bit the output and LSE of the full
    batch_decode call (AOTINFER_DECODE_PREPARED=off), for an eager call, a call into given
    outputs from a non-contiguous q, a cache of other strides (a slice of a wider cache,
    prepared anew), per-call sinks, scales and window, and a CUDA-graph replay; a q that is
    not 16-byte aligned is refused by the prepared launch as by the full call."""
    q, cache, indptr, indices, last = make_batch(lens, dtype=torch.bfloat16, seed=11)
    wide = torch.randn(cache.shape[0], 3, *cache.shape[2:], device=DEV).to(cache.dtype)
    wide[:, :2] = cache
    other = wide[:, :2]  # the same values, page stride 3/2 of the cache's
    qkv = torch.randn(q.shape[0], q.shape[1] + 8, q.shape[2], device=DEV).to(q.dtype)
    qkv[:, : q.shape[1]] = q
    sinks = torch.randn(32, generator=_gen(5), device=DEV)
    scales = dict(q_scale=0.7, k_scale=1.3, v_scale=0.6, window_left=700)
    results = {}
    for mode in ("off", "on"):
        monkeypatch.setenv("AOTINFER_DECODE_PREPARED", mode)
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
        w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
        assert (w._plan.prepared is None) == (mode == "off")
        eager = w.run(q, cache, return_lse=True)
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:2], float("nan"), device=DEV)
        w.run(qkv[:, : q.shape[1]], other, out=out, lse=lse)
        per_call = w.run(q, cache, return_lse=True, sinks=sinks, **scales)
        out_g = torch.full_like(q, float("nan"))
        lse_g = torch.full(q.shape[:2], float("nan"), device=DEV)
        captured_run(w, q, cache, out_g, lse_g).replay()
        torch.cuda.synchronize()
        results[mode] = (*eager, out, lse, *per_call, out_g, lse_g)
        if mode == "on":
            assert len(w._plan.prepared) >= 3  # other strides, sinks: prepared anew
        bad = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEV)[1:].view(q.shape)
        bad.copy_(q)
        with pytest.raises(ValueError, match="16-byte aligned"):
            w.run(bad, cache)
    want = oracle(q, cache, indptr, indices, last)
    check(results["on"][0], results["on"][1], want, torch.bfloat16)
    want = oracle(q, cache, indptr, indices, last, sinks=sinks, **scales)
    check(results["on"][4], results["on"][5], want, torch.bfloat16)
    for a, b in zip(results["on"], results["off"]):
        assert torch.equal(a, b)


def test_run_does_not_sync():
    q, cache, indptr, indices, last = make_batch([17, 16384, 3])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, 32, 8, 128, 16)
    w.run(q, cache)  # first call imports the provider
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        w.run(q, cache, return_lse=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---------------------------------------------------------------- CUDA graphs


def captured_run(w, q, cache, out, lse, **run_kwargs):
    """A CUDA graph of ``w.run(q, cache, out=out, lse=lse, **run_kwargs)``, after one warm-up
    call on a side stream (as torch's capture recipe asks)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        w.run(q, cache, out=out, lse=lse, **run_kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q, cache, out=out, lse=lse, **run_kwargs)
    return graph


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("max_pages", [64, 4096])
def test_cuda_graph_replay_after_rewriting_page_tables(layout, max_pages):
    batch, hq, hkv, d, ps = 7, 32, 8, 128, 16
    pool = max_pages + 8
    shape = (pool, 2, ps, hkv, d) if layout == "NHD" else (pool, 2, hkv, ps, d)
    cache = torch.randn(shape, generator=_gen(1), device=DEV).half()
    ip = torch.empty(batch + 1, dtype=torch.int32, device=DEV)
    ix = torch.empty(max_pages, dtype=torch.int32, device=DEV)
    lp = torch.empty(batch, dtype=torch.int32, device=DEV)
    w = aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(), ip, ix, lp, layout)
    q = torch.empty(batch, hq, d, dtype=torch.float16, device=DEV)
    out = torch.empty(batch, hq, d, dtype=torch.float16, device=DEV)
    lse = torch.empty(batch, hq, device=DEV)
    rnd = random.Random(max_pages)

    def new_tables():
        # pages per request; with a large buffer, one request holds most of them
        n_long = rnd.randint(max_pages // 2, max_pages - batch) if max_pages >= 1024 else 0
        room = (max_pages - n_long) // batch
        pages = [rnd.randint(1, max(room, 1)) for _ in range(batch)]
        if n_long:
            pages[rnd.randrange(batch)] = n_long
        assert sum(pages) <= max_pages
        ids = torch.randperm(pool, generator=_gen(rnd.randrange(1 << 30)), device=DEV)
        indices = ids[: sum(pages)].to(torch.int32)
        indptr = torch.tensor([0] + pages, device=DEV).cumsum(0).to(torch.int32)
        last = torch.randint(1, ps + 1, (batch,), generator=_gen(rnd.randrange(99)), device=DEV)
        return indptr, indices, last.to(torch.int32)

    tables = new_tables()
    w.plan(*tables, hq, hkv, d, ps)
    q.copy_(torch.randn(batch, hq, d, generator=_gen(2), device=DEV))
    graph = captured_run(w, q, cache, out, lse)
    for step in range(4):
        if step:
            tables = new_tables()
            w.plan(*tables, hq, hkv, d, ps)  # copies into ip/ix/lp
            q.copy_(torch.randn(batch, hq, d, generator=_gen(10 + step), device=DEV))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, lse, oracle(q, cache, *tables, layout), torch.float16)


@pytest.mark.parametrize("cluster_merge", ["on", "off"])
@pytest.mark.parametrize("kv_len", [1024, 16384])
def test_split_single_request_eager_and_captured(kv_len, cluster_merge, monkeypatch):
    """One request split over the grid merges in the grid when eager and in the merge kernel
    when captured (aotinfer._decode_wrapper._eager_merges_in_grid), or, with 8 splits or
    fewer on sm_90+, in thread-block clusters either way: every path matches the oracle, and
    the eager calls leave the merge counters at 0."""
    monkeypatch.setenv("AOTINFER_DECODE_CLUSTER_MERGE", cluster_merge)
    q, cache, indptr, indices, last = make_batch([kv_len], dtype=torch.bfloat16, seed=kv_len)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    assert w._plan.split.max_splits > 1 and w._plan.eager_split_args is not None
    want = oracle(q, cache, indptr, indices, last)

    def arrivals_reset():
        torch.cuda.synchronize()
        assert not w._arrivals.any()

    check_eager_and_captured(w, q, cache, want, after_eager=arrivals_reset)


def check_eager_and_captured(w, q, cache, want, after_eager=None):
    """``w.run`` eagerly (then ``after_eager()``) and as a replayed CUDA graph, each into
    poisoned out and lse, against ``want`` (bf16 q)."""
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device=DEV)
    w.run(q, cache, out=out, lse=lse)
    if after_eager:
        after_eager()
    check(out, lse, want, torch.bfloat16)
    graph = captured_run(w, q, cache, out, lse)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, lse, want, torch.bfloat16)


@pytest.mark.parametrize("hkv, d, kv_len", [(32, 128, 4096), (16, 256, 1024), (16, 256, 4096)])
def test_single_request_of_many_kv_heads_matches_the_oracle(hkv, d, kv_len):
    """One request with as many KV heads as query heads, as planned: MHA 32/32 at 4096 keys
    and 16/16 d256 at 1024 take 8 splits whose clusters of 8 overflow an H100 / H200 (256
    CTAs where 240 fit; 128 at d256 where 120 fit), so the provider merges them another way;
    16/16 d256 at 4096 takes 8 splits planned for one CTA an SM. Through the wrapper (eager
    and captured) and single_decode_with_kv_cache, against the oracle."""
    hq = hkv
    q, cache, indptr, indices, last = make_batch(
        [kv_len], hq=hq, hkv=hkv, d=d, dtype=torch.bfloat16, seed=d + kv_len
    )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD")
    w.plan(indptr, indices, last, hq, hkv, d, 16, q_data_type=torch.bfloat16)
    assert w._plan.split.max_splits > 1
    check_eager_and_captured(w, q, cache, oracle(q, cache, indptr, indices, last))
    k, v = unpack_paged_kv_cache(cache, "NHD")
    order = indices.long()
    keys = k[order].reshape(-1, hkv, d)[:kv_len].contiguous()
    vals = v[order].reshape(-1, hkv, d)[:kv_len].contiguous()
    so, sl = aotinfer.single_decode_with_kv_cache(q[0], keys, vals, return_lse=True)
    check(so[None], sl[None], ref.attention(q, keys, vals, compute_dtype=F64), torch.bfloat16)


def test_single_request_whose_clusters_overflow_the_card_merges_another_way():
    """fixed_split_size cuts one MHA request (32/32 heads, d128) into 8 splits: 256 CTAs in
    clusters of 8, more than an H100 / H200 holds at once (240). The provider asks the
    occupancy API and, where they do not all fit, merges in the grid (eager: arrivals) or in
    the merge kernel after it (captured): both match the oracle, LSE included."""
    kv_len = 4096
    q, cache, indptr, indices, last = make_batch(
        [kv_len], hq=32, hkv=32, dtype=torch.bfloat16, seed=11
    )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
    w.plan(indptr, indices, last, 32, 32, 128, 16, q_data_type=torch.bfloat16, fixed_split_size=32)
    assert w._plan.split.max_splits == 8
    check_eager_and_captured(w, q, cache, oracle(q, cache, indptr, indices, last))


@pytest.mark.parametrize(
    "d, dtype, splits, q_len, window, sinks",
    [
        (128, torch.bfloat16, 8, 1, -1, False),
        (128, torch.float16, 2, 1, -1, True),
        (64, torch.float16, 5, 2, -1, False),
        (256, torch.bfloat16, 3, 1, -1, True),
        (128, torch.bfloat16, 8, 1, 100, False),  # a window: the first splits are empty
        (128, torch.float16, 7, 4, 300, True),
        (128, torch.bfloat16, 16, 1, -1, False),  # beyond a portable cluster's 8 CTAs
        (64, torch.float16, 12, 2, 200, True),  # 11 splits (chunks of 6 pages)
    ],
)
def test_cluster_merge_matches_the_oracle_and_the_merge_kernel(
    d, dtype, splits, q_len, window, sinks, monkeypatch
):
    """One request in 2..8 splits (fixed_split_size), merged in thread-block clusters through
    distributed shared memory (sm_90+, cluster_merge.cuh) and, pinned off, by the in-grid
    merge: both match the oracle (LSE included) and each other. The last two cases (11 and 16
    splits: 63 pages in chunks of 6 and 4) are beyond a portable cluster: both pins take the
    in-grid merge there."""
    kv_len = 1000
    pages = -(-kv_len // 16)
    chunk = -(-pages // splits)
    q, cache, indptr, indices, last = make_batch(
        [kv_len], d=d, dtype=dtype, q_len=q_len, seed=splits * 10 + d
    )
    sink_t = torch.randn(32, generator=_gen(3), device=DEV) if sinks else None
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
    w.plan(indptr, indices, last, 32, 8, d, 16, q_data_type=dtype, fixed_split_size=chunk,
           window_left=window, q_len_per_req=q_len)  # fmt: skip
    assert w._plan.split.max_splits == -(-pages // chunk) > 1
    want = oracle(q, cache, indptr, indices, last, q_len=q_len, window_left=window, sinks=sink_t)
    got = {}
    for pin in ("on", "off"):
        monkeypatch.setenv("AOTINFER_DECODE_CLUSTER_MERGE", pin)
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:2], float("nan"), device=DEV)
        w.run(q, cache, out=out, lse=lse, sinks=sink_t)
        check(out, lse, want, dtype)
        got[pin] = (out.float(), lse)
    torch.testing.assert_close(got["on"][0], got["off"][0], rtol=0, atol=TOL[dtype])
    torch.testing.assert_close(got["on"][1], got["off"][1], rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "hq, hkv, d, batch, q_len, chunk, sinks",
    [
        (16, 1, 128, 16, 1, 8, False),  # a TP shard: 16 query rows a CTA, 8 splits
        (32, 8, 128, 6, 1, 16, True),  # 4 splits
        (32, 8, 64, 5, 2, 32, False),  # 2 splits, two query rows a request
        (16, 8, 256, 2, 1, 11, True),  # 6 splits
        (32, 8, 128, 4, 1, 8, False),  # 32 clusters of 8: beyond 7/8 of the slots, the work list
        (32, 8, 128, 40, 1, 16, False),  # 1280 CTAs: beyond one round, the work list
    ],
)
def test_uniform_batch_in_grid_form_matches_the_oracle(
    hq, hkv, d, batch, q_len, chunk, sinks, monkeypatch
):
    """A uniform batch cut into 2..8 pieces whose CTAs fit in the resident slots (3/4 of them
    for clusters of 3-8: _decode_plan.cluster_room) takes the grid form of its work list on sm_90+
    (_decode_plan.uniform_grid), whose splits the provider merges in thread-block clusters
    where they all fit at once, else in the grid; pinned off, or beyond those slots, the work
    list. Eager and captured, every form matches the oracle."""
    from aotinfer import _decode_plan

    real = _decode_plan.plan_work  # 63 pages a request, pieces of `chunk` pages
    monkeypatch.setattr(
        _decode_plan, "plan_work", lambda *a, **k: real(*a, **dict(k, force_chunk=chunk))
    )
    dtype = torch.bfloat16
    q, cache, indptr, indices, last = make_batch(
        [1000] * batch, hq=hq, hkv=hkv, d=d, dtype=dtype, q_len=q_len, seed=batch + d
    )
    sink_t = torch.randn(hq, generator=_gen(5), device=DEV) if sinks else None
    want = oracle(q, cache, indptr, indices, last, q_len=q_len, sinks=sink_t)
    for pin in ("on", "off"):
        monkeypatch.setenv("AOTINFER_DECODE_CLUSTER_MERGE", pin)
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
        w.plan(indptr, indices, last, hq, hkv, d, 16, q_data_type=dtype, q_len_per_req=q_len)
        sms = torch.cuda.get_device_properties(DEV).multi_processor_count
        splits, slots = -(-63 // chunk), _decode_plan.resident_ctas(d) * sms
        one_round = batch * hkv * splits <= _decode_plan.cluster_room(splits, slots)
        grid_form = pin == "on" and torch.cuda.get_device_capability()[0] >= 9 and one_round
        assert (w._plan.split.work is None) == grid_form
        assert w._plan.split.max_splits == -(-63 // chunk)
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:2], float("nan"), device=DEV)
        w.run(q, cache, out=out, lse=lse, sinks=sink_t)
        check(out, lse, want, dtype)
        graph = captured_run(w, q, cache, out, lse, sinks=sink_t)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, lse, want, dtype)


@pytest.mark.parametrize("batch", [2, 4, 9])
def test_fixed_split_batch_merges_in_clusters_that_fit_or_in_the_grid(batch, monkeypatch):
    """A batch with fixed_split_size runs the grid plan, whose splits (8 here) the provider
    merges in clusters where every cluster fits at once (cudaOccupancyMaxActiveClusters; 16
    clusters of 8 on an H100 or H200) and in the grid where not (32 or 72 clusters of 8 there):
    every form, and the pin off, matches the oracle."""
    q, cache, indptr, indices, last = make_batch([1000] * batch, dtype=torch.bfloat16, seed=batch)
    want = oracle(q, cache, indptr, indices, last)
    for pin in ("on", "off"):
        monkeypatch.setenv("AOTINFER_DECODE_CLUSTER_MERGE", pin)
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD", use_tensor_cores=True)
        w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16,
               fixed_split_size=8)  # fmt: skip
        assert w._plan.split.work is None and w._plan.split.max_splits == 8
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:2], float("nan"), device=DEV)
        w.run(q, cache, out=out, lse=lse)
        check(out, lse, want, torch.bfloat16)


@pytest.mark.parametrize("cluster_merge", ["on", "off"])
@pytest.mark.parametrize("sinks", [False, True])
def test_nan_logits_give_nan_output_and_lse(sinks, cluster_merge, decode_kernel, monkeypatch):
    """A (row, head) with a NaN logit gets a NaN output and a NaN LSE, as the reference gives:
    a NaN in q (every logit of that head; an unsplit and a split request) or in one key's K
    (one logit of each head of its group, inside one split of six), merged in the grid or in a
    cluster when eager and by the merge kernel or in a cluster when captured. (An LSE of -inf
    there, an empty row's, let the split merges drop the NaN split and return a finite wrong
    output.) Every other (row, head) matches the oracle."""
    from aotinfer import _decode_plan

    monkeypatch.setenv("AOTINFER_DECODE_CLUSTER_MERGE", cluster_merge)
    real = _decode_plan.plan_work  # pieces of 32 pages: request 1's 188 pages in 6 splits
    monkeypatch.setattr(
        _decode_plan, "plan_work", lambda *a, **k: real(*a, **dict(k, force_chunk=32))
    )
    q, cache, indptr, indices, last = make_batch([17, 3000, 1, 1000], dtype=torch.bfloat16, seed=23)
    nan = float("nan")
    q[0, 3, 5] = nan
    q[3, 9] = nan
    key = 2000  # of request 1, in its KV head 2 (query heads 8-11)
    cache[indices[indptr[1] + key // 16], 0, key % 16, 2, 7] = nan
    sink_t = torch.randn(32, generator=_gen(4), device=DEV) if sinks else None
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD")
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    assert w._plan.split.max_splits == 6
    o64, l64 = oracle(q, cache, indptr, indices, last, sinks=sink_t)
    bad = torch.isnan(l64)
    assert bad.sum() == 6 and bad[1, 8:12].all() and bad[0, 3] and bad[3, 9]

    # Poisoned with a finite value: a NaN left unwritten would pass for an expected NaN.
    out = torch.full_like(q, 3.0)
    lse = torch.full(q.shape[:2], 3.0, device=DEV)
    w.run(q, cache, out=out, lse=lse, sinks=sink_t)
    check_nan_where(bad, out, lse, (o64, l64), torch.bfloat16)
    graph = captured_run(w, q, cache, out, lse, sinks=sink_t)
    out.fill_(3.0)
    lse.fill_(3.0)
    graph.replay()
    torch.cuda.synchronize()
    check_nan_where(bad, out, lse, (o64, l64), torch.bfloat16)


# ---------------------------------------------------------------- single decode


@pytest.mark.parametrize("kv_len", [1, 17, 2048, 32768, 77777])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_single_decode(kv_len, layout):
    hq, hkv, d = 32, 8, 128
    g = _gen(kv_len)
    q = torch.randn(hq, d, generator=g, device=DEV).half()
    k = torch.randn(kv_len, hkv, d, generator=g, device=DEV).half()
    v = torch.randn(kv_len, hkv, d, generator=g, device=DEV).half()
    kk, vv = (
        (k, v)
        if layout == "NHD"
        else (k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous())
    )
    out, lse = aotinfer.single_decode_with_kv_cache(q, kk, vv, kv_layout=layout, return_lse=True)
    wo, wl = ref.attention(q[None], k, v, compute_dtype=F64)
    check(out[None], lse[None], (wo, wl), torch.float16)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize(
    "dtype, kv_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float8_e4m3fn)]
)
def test_single_decode_options(mode, d, dtype, kv_dtype, decode_kernel):
    hq, hkv, kv_len = 28, 4, 3000
    g = _gen(d)
    q = torch.randn(hq, d, generator=g, device=DEV).to(dtype)
    k = torch.randn(kv_len, hkv, d, generator=g, device=DEV).to(kv_dtype)
    v = torch.randn(kv_len, hkv, d, generator=g, device=DEV).to(kv_dtype)
    opts = dict(
        pos_encoding_mode=mode,
        logits_soft_cap=20.0,
        window_left=1000,
        sm_scale=0.1,
        rope_scale=2.0,
        rope_theta=5e5,
        k_scale=0.9,
        v_scale=1.1,
    )
    out, lse = aotinfer.single_decode_with_kv_cache(q, k, v, return_lse=True, **opts)
    want = ref.attention(
        q[None], k, v, compute_dtype=F64, alibi_slopes=get_alibi_slopes(hq), **opts
    )
    check(out[None], lse[None], want, dtype, fp8=kv_dtype in FP8)


@pytest.mark.parametrize("kv_len", [17, 3000])
def test_single_decode_nan_q_head(kv_len, decode_kernel):
    """A NaN in one query head gives that head NaN output and NaN LSE, as the reference does,
    and every other head the oracle's. kv 17: one tile whose NaN logits sit beside masked ones
    (the CUDA-core kernel's running max, fmaxf, drops NaN: it once read the row as empty, 0
    and -inf); kv 3000: the request over several CTAs, merged. single_decode allocates its
    outputs, so an output-sized block of 3.0 is freed just before the call: the caching
    allocator's best fit for the output, so that an unwritten head most likely reads 3.0, not
    a NaN left by an earlier test."""
    hq, hkv, d = 32, 8, 128
    g = _gen(kv_len + 5)
    q = torch.randn(hq, d, generator=g, device=DEV).to(torch.bfloat16)
    k = torch.randn(kv_len, hkv, d, generator=g, device=DEV).to(torch.bfloat16)
    v = torch.randn(kv_len, hkv, d, generator=g, device=DEV).to(torch.bfloat16)
    q[3, 5] = float("nan")
    o64, l64 = ref.attention(q[None], k, v, compute_dtype=F64)
    assert torch.isnan(l64[0, 3]) and torch.isnan(o64[0, 3]).all()
    poison = torch.full((hq, d), 3.0, dtype=torch.bfloat16, device=DEV)
    del poison
    out, lse = aotinfer.single_decode_with_kv_cache(q, k, v, return_lse=True)
    bad = (torch.arange(hq, device=DEV) == 3)[None]
    check_nan_where(bad, out[None], lse[None], (o64, l64), torch.bfloat16)


def test_single_decode_non_contiguous_q():
    qkv = torch.randn(32, 3, 128, generator=_gen(0), device=DEV).half()
    k = torch.randn(500, 8, 128, generator=_gen(1), device=DEV).half()
    v = torch.randn(500, 8, 128, generator=_gen(2), device=DEV).half()
    q = qkv[:, 0]
    assert not q.is_contiguous()
    out = aotinfer.single_decode_with_kv_cache(q, k, v)
    check(out[None], None, ref.attention(q[None], k, v, compute_dtype=F64), torch.float16)
    assert math.isfinite(float(out.float().abs().max()))


# ---------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_decode_and_merges(backend):
    """run(), single decode and a merge in one compiled graph, against the oracle; then a
    re-plan over the same cache replays the same graph (no recompilation)."""
    torch._dynamo.reset()
    q, cache, indptr, indices, last = make_batch([17, 512, 2048], seed=31)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.float16)
    k_single = cache[:4, 0].reshape(-1, 8, 128)
    v_single = cache[:4, 1].reshape(-1, 8, 128)

    def step(q, cache):
        out, lse = w.run(q, cache, return_lse=True)
        single, single_lse = aotinfer.single_decode_with_kv_cache(
            q[0], k_single, v_single, return_lse=True
        )
        merged, merged_lse = aotinfer.merge_state(out[:1], lse[:1], single[None], single_lse[None])
        return out, lse, single, merged, merged_lse

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    out, lse, single, merged, merged_lse = compiled(q, cache)
    check(out, lse, oracle(q, cache, indptr, indices, last), torch.float16)
    want = aotinfer.single_decode_with_kv_cache(q[0], k_single, v_single, return_lse=True)
    torch.testing.assert_close(single, want[0], rtol=0, atol=0)
    eager = aotinfer.merge_state(out[:1], lse[:1], single[None], want[1][None])
    torch.testing.assert_close(merged, eager[0], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(merged_lse, eager[1], rtol=1e-5, atol=1e-5)
    # Outputs the graph allocates are not poisoned (the conftest leaves traced tensors
    # alone), so run() once more into NaN-filled out / lse passed in, as a caller would.
    out_p = torch.full_like(q, float("nan"))
    lse_p = torch.full(q.shape[:2], float("nan"), device=DEV)
    into = torch.compile(
        lambda q, c, o, s: w.run(q, c, out=o, lse=s, return_lse=True),
        fullgraph=True,
        backend=backend,
    )
    into(q, cache, out_p, lse_p)
    assert torch.equal(out_p, out) and torch.equal(lse_p, lse)
    # Re-plan over the same cache (other pages, other lengths): the same graph runs.
    indices2 = torch.randperm(int(indptr[-1]) + 7, generator=_gen(32), device=DEV)
    indices2 = indices2[: int(indptr[-1])].to(torch.int32)
    last2 = torch.tensor([3, 16, 9], dtype=torch.int32, device=DEV)
    w.plan(indptr, indices2, last2, 32, 8, 128, 16, q_data_type=torch.float16)
    q2 = torch.randn(q.shape, generator=_gen(33), device=DEV).half()
    with torch._dynamo.config.patch(error_on_recompile=True):
        out2, lse2, *_ = compiled(q2, cache)
    check(out2, lse2, oracle(q2, cache, indptr, indices2, last2), torch.float16)
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_run_return_lse_and_forward(backend):
    """The aliases compile too: run_return_lse and the deprecated forward() /
    forward_return_lse() (an op of their own, with forward()'s per-call options), against
    the oracle, into NaN-poisoned outputs where the caller passes them."""
    torch._dynamo.reset()
    q, cache, indptr, indices, last = make_batch([9, 700, 2048], seed=41)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.float16)
    out_p = torch.full_like(q, float("nan"))
    lse_p = torch.full(q.shape[:2], float("nan"), device=DEV)
    alias = torch.compile(
        lambda q, c, o, s: w.run_return_lse(q, c, out=o, lse=s), fullgraph=True, backend=backend
    )
    alias(q, cache, out_p, lse_p)
    check(out_p, lse_p, oracle(q, cache, indptr, indices, last), torch.float16)
    opts = dict(pos_encoding_mode="ALIBI", logits_soft_cap=30.0, window_left=300)
    fwd = torch.compile(
        lambda q, c: w.forward_return_lse(q, c, **opts), fullgraph=True, backend=backend
    )
    out, lse = fwd(q, cache)
    want = oracle(q, cache, indptr, indices, last, alibi_slopes=get_alibi_slopes(32), **opts)
    check(out, lse, want, torch.float16)
    plain = torch.compile(lambda q, c: w.forward(q, c), fullgraph=True, backend=backend)
    check(plain(q, cache), None, oracle(q, cache, indptr, indices, last), torch.float16)
    torch._dynamo.reset()


# ---------------------------------------------------------------- input edges (session 49)


def test_input_edges_on_the_device():
    """A table on the device with an empty cache, a cache of unaligned strides: ValueErrors
    before any launch. Strided tables on the device and an unaligned single-decode k / v
    (copied): the oracle's answer, into poisoned outputs."""
    q, cache, indptr, indices, last = make_batch([9, 700, 2048], seed=51)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    ip, ix, lp = (torch.stack([t, t], 1)[:, 0] for t in (indptr, indices, last))
    assert not ix.is_contiguous() and ix.is_cuda
    w.plan(ip, ix, lp, 32, 8, 128, 16, q_data_type=torch.float16)
    with pytest.raises(ValueError, match="has 0 pages but the page table of plan\\(\\) uses pages"):
        w.run(q, cache[:0])
    out = torch.full_like(q, float("nan"))
    w.run(q, cache, out=out)
    check(out, None, oracle(q, cache, indptr, indices, last), torch.float16)
    wide = torch.zeros(*cache.shape[:-1], 132, dtype=cache.dtype, device=DEV)
    wide[..., :128] = cache
    with pytest.raises(ValueError, match="paged_kv_cache must have every stride but the last"):
        w.run(q, wide[..., :128])
    k = wide[:40, 0].reshape(-1, 8, 132)[..., :128]
    v = wide[:40, 1].reshape(-1, 8, 132)[..., :128]
    got = aotinfer.single_decode_with_kv_cache(q[0], k, v)
    want = ref.attention(q[:1], k, v, compute_dtype=F64)
    check(got[None], None, want, torch.float16)
