"""Paged-KV append and the merge kernels against the reference on fresh random inputs;
append then decode reads back what was appended; merges captured in a CUDA graph.

Tolerances: appends are copies (exact). Merges accumulate in float32 and round once to
v's dtype: float32 1e-5, float16 1e-3, bfloat16 8e-3 (bf16's spacing is 2**-8 relative);
the merged LSE 1e-5 absolute.
"""

from __future__ import annotations

import math

import pytest
import torch

import aotinfer
from aotinfer._attention_utils import unpack_paged_kv_cache
from aotinfer.reference import attention as ref_attn
from aotinfer.reference import cascade as ref_cascade
from aotinfer.reference import page as ref_page

DEV = "cuda"
TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def _append_setup(old, new, page_size, layout, dtype, hkv=8, d=128, seed=0, tuple_cache=False):
    """Requests with ``old`` tokens each appending ``new`` tokens: a grown page table, the
    new keys/values and a random cache."""
    g = _gen(seed)
    seq = [o + n for o, n in zip(old, new)]
    pages = [-(-s // page_size) for s in seq]
    total = sum(pages) + 5
    indices = torch.randperm(total, generator=g, device=DEV)[: sum(pages)].to(torch.int32)
    indptr = torch.tensor([0] + pages, device=DEV).cumsum(0).to(torch.int32)
    last = torch.tensor(
        [s - (p - 1) * page_size for s, p in zip(seq, pages)], dtype=torch.int32, device=DEV
    )
    shape = (total, 2, page_size, hkv, d) if layout == "NHD" else (total, 2, hkv, page_size, d)
    cache = torch.randn(shape, generator=g, device=DEV).to(dtype)
    if tuple_cache:
        cache = (cache[:, 0].contiguous(), cache[:, 1].contiguous())
    nnz = sum(new)
    k = torch.randn(nnz, hkv, d, generator=g, device=DEV).to(dtype)
    v = torch.randn(nnz, hkv, d, generator=g, device=DEV).to(dtype)
    append_indptr = torch.tensor([0] + new, device=DEV).cumsum(0).to(torch.int32)
    return dict(
        seq=seq,
        indices=indices,
        indptr=indptr,
        last=last,
        cache=cache,
        k=k,
        v=v,
        append_indptr=append_indptr,
        nnz=nnz,
    )


def _append(c, page_size, layout):
    seq_lens = aotinfer.get_seq_lens(c["indptr"], c["last"], page_size)
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"])
    aotinfer.append_paged_kv_cache(
        c["k"], c["v"], b, p, c["cache"], c["indices"], c["indptr"], c["last"], kv_layout=layout
    )
    return b, p


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_append_matches_reference(layout, page_size, dtype):
    old, new = [0, 5, 100, 63, 7], [1, 17, 3, 64, 130]
    c = _append_setup(old, new, page_size, layout, dtype, tuple_cache=page_size == 16)
    # the expected cache, built on byte views (an append is a copy; fp8 needs no arithmetic)
    expect = tuple(t.view(torch.uint8).clone() for t in unpack_paged_kv_cache(c["cache"], layout))
    b, p = _append(c, page_size, layout)
    ref_b, ref_p = ref_page.get_batch_indices_positions(
        c["append_indptr"], torch.tensor(c["seq"]), c["nnz"]
    )
    assert b.tolist() == ref_b.tolist() and p.tolist() == ref_p.tolist()
    ref_page.append_paged_kv_cache(
        c["k"].view(torch.uint8),
        c["v"].view(torch.uint8),
        b,
        p,
        *expect,
        c["indices"],
        c["indptr"],
        layout,
    )
    got = unpack_paged_kv_cache(c["cache"], layout)
    for g_half, e_half in zip(got, expect):  # bit-exact copies, untouched slots unchanged
        assert torch.equal(g_half.view(torch.uint8), e_half)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_skips_tokens_the_page_table_cannot_place(layout):
    """Padding slots (-1), a negative position, a position past the request's pages, a batch
    index past the batch, a page id outside the cache and an indptr past the indices: the
    kernel skips each, never writes or reads outside, and the cache equals the reference's
    (which skips the same tokens)."""
    page_size = 16
    old, new = [0, 5, 100], [3, 17, 2]
    c = _append_setup(old, new, page_size, layout, torch.bfloat16, seed=5)
    seq_lens = aotinfer.get_seq_lens(c["indptr"], c["last"], page_size)
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"] + 4)
    assert b[c["nnz"] :].tolist() == [-1] * 4
    bad_b = torch.tensor([1, 0, 3, 2], dtype=torch.int32, device=DEV)
    bad_p = torch.tensor([-1, 4 * page_size, 0, c["seq"][2] - 1], dtype=torch.int32, device=DEV)
    b, p = torch.cat([b, bad_b]), torch.cat([p, bad_p])
    g = _gen(6)
    k = torch.randn(b.numel(), 8, 128, generator=g, device=DEV).bfloat16()
    v = torch.randn(b.numel(), 8, 128, generator=g, device=DEV).bfloat16()
    indices = c["indices"].clone()
    indices[-1] = 1 << 30  # request 2's last page: outside the cache
    # Request 3 of a longer indptr claims pages past the end of indices.
    indptr = torch.cat([c["indptr"], c["indptr"][-1:] + 1000])
    b[-2] = 3  # (the batch-index-past-the-batch token becomes request 3's)
    expect = tuple(t.clone() for t in unpack_paged_kv_cache(c["cache"], layout))
    ref_page.append_paged_kv_cache(k, v, b, p, *expect, indices, indptr, layout)
    aotinfer.append_paged_kv_cache(k, v, b, p, c["cache"], indices, indptr, c["last"], layout)
    torch.cuda.synchronize()
    for got, want in zip(unpack_paged_kv_cache(c["cache"], layout), expect):
        assert torch.equal(got, want)


def test_append_strided_keys_then_decode_reads_them_back():
    page_size, layout = 16, "HND"
    old, new = [0, 40, 300, 2047], [5, 1, 17, 1]
    c = _append_setup(old, new, page_size, layout, torch.bfloat16, seed=3)
    fused = torch.randn(c["nnz"], 3, 8, 128, generator=_gen(4), device=DEV).bfloat16()
    fused[:, 1], fused[:, 2] = c["k"], c["v"]
    c["k"], c["v"] = fused[:, 1], fused[:, 2]
    _append(c, page_size, layout)
    k_cache, v_cache = unpack_paged_kv_cache(c["cache"], layout)
    t = 0
    for b, (s, n) in enumerate(zip(c["seq"], new)):
        ids = c["indices"][c["indptr"][b] : c["indptr"][b + 1]]
        k, v = ref_attn.gather_paged_kv(k_cache, v_cache, ids, s, layout)
        assert torch.equal(k[s - n :], c["k"][t : t + n]) and torch.equal(
            v[s - n :], c["v"][t : t + n]
        )
        t += n
    q = torch.randn(len(new), 32, 128, generator=_gen(5), device=DEV).bfloat16()
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(64 << 20, dtype=torch.uint8, device=DEV), layout
    )
    w.plan(c["indptr"], c["indices"], c["last"], 32, 8, 128, page_size, q_data_type=torch.bfloat16)
    out = w.run(q, c["cache"])
    o64, _ = ref_attn.batch_decode(
        q,
        k_cache,
        v_cache,
        c["indptr"],
        c["indices"],
        c["last"],
        kv_layout=layout,
        compute_dtype=torch.float64,
    )
    torch.testing.assert_close(out.double(), o64, rtol=8e-3, atol=8e-3)


def test_get_seq_lens_and_positions_on_device():
    indptr = torch.tensor([0, 3, 4, 4, 9], dtype=torch.int32, device=DEV)
    last = torch.tensor([5, 16, 7, 1], dtype=torch.int32, device=DEV)
    assert aotinfer.get_seq_lens(indptr, last, 16).tolist() == [37, 16, 7, 65]
    append_indptr = torch.tensor([0, 1, 3, 6, 10], dtype=torch.int32, device=DEV)
    seq = torch.tensor([5, 5, 5, 5], dtype=torch.int32, device=DEV)
    b = torch.empty(12, dtype=torch.int32, device=DEV)
    p = torch.empty(12, dtype=torch.int32, device=DEV)
    aotinfer.get_batch_indices_positions(append_indptr, seq, 12, b, p)
    assert b.tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3, -1, -1]
    assert p.tolist() == [4, 3, 4, 2, 3, 4, 1, 2, 3, 4, 0, 0]
    # Slots before append_indptr[0] stay empty, as FlashInfer's kernel leaves them.
    late = torch.tensor([2, 3, 5], dtype=torch.int32, device=DEV)
    b, p = aotinfer.get_batch_indices_positions(late, seq[:2], 6)
    assert b.tolist() == [-1, -1, 0, 1, 1, -1] and p.tolist() == [0, 0, 4, 3, 4, 0]
    with pytest.raises(ValueError, match=r"kv_last_page_len must have batch_size = .* = 4 "):
        aotinfer.get_seq_lens(indptr, last[:1], 16)


# ---------------------------------------------------------------- merges


def _states(n, s, h, d, dtype, seed, neg_inf=True):
    g = _gen(seed)
    v = torch.randn(n, s, h, d, generator=g, device=DEV).to(dtype)
    lse = torch.randn(n, s, h, generator=g, device=DEV) * 5
    if neg_inf:
        lse[0, :, 0] = -math.inf  # a row where no state saw a key
        lse[n - 1, 0, :] = -math.inf  # one empty state
    return v, lse


def _close(v, s, ev, es, dtype):
    assert not torch.isnan(v).any()
    torch.testing.assert_close(v.float(), ev.float(), rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(s, es.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 2, 1, 64),
        (77, 5, 32, 128),
        (1000, 17, 8, 256),
        (3, 37, 4, 6),  # a head dim not a multiple of 4: one column per lane
        (2, 64, 32, 128),  # two batches of states per warp
        (2, 40, 3, 200),  # a second, partial column pass
    ],
)
def test_merge_states(dtype, shape):
    v, s = _states(*shape, dtype, seed=shape[0])
    got_v, got_s = aotinfer.merge_states(v, s)
    ev, es = ref_cascade.merge_states(v, s, torch.float64)
    assert got_v.dtype == dtype and got_s.dtype == torch.float32
    _close(got_v, got_s, ev, es, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_merge_state_and_in_place(dtype):
    v, s = _states(300, 2, 16, 128, dtype, seed=7)
    ev, es = ref_cascade.merge_states(v, s, torch.float64)
    mv, ms = aotinfer.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    _close(mv, ms, ev, es, dtype)
    base_v, base_s = v[:, 0].clone(), s[:, 0].clone()
    mask = torch.rand(300, generator=_gen(8), device=DEV) < 0.5
    aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1], mask=mask)
    _close(base_v[mask], base_s[mask], ev[mask], es[mask], dtype)
    assert torch.equal(base_v[~mask], v[~mask, 0]) and torch.equal(base_s[~mask], s[~mask, 0])


def _special_states(n, num_states, h, d, dtype, seed):
    """Random states with the cases of reference/cascade.py's rules scattered over rows and
    heads: empty states (LSE -inf) whose v is NaN, NaN and +inf LSEs, valid states whose v
    is NaN under a weight that underflows to 0 in float32, and a row all empty."""
    v, s = _states(n, num_states, h, d, dtype, seed, neg_inf=False)
    pick = torch.rand(n, num_states, h, generator=_gen(seed + 1000), device=DEV)
    s[pick < 0.15] = -math.inf
    v[pick < 0.15] = math.nan
    s[(pick > 0.97) & (pick < 0.98)] = math.nan
    s[pick > 0.99] = math.inf
    tiny = (pick > 0.5) & (pick < 0.52)
    s[tiny], v[tiny] = -400.0, math.nan
    s[n // 2] = -math.inf
    return v, s


def _close_with_nan(v, s, ev, es, dtype):
    """NaN exactly where the reference has NaN, the rest within the merge tolerances."""
    tol = TOL[dtype]
    torch.testing.assert_close(v.cpu().float(), ev.float(), rtol=tol, atol=tol, equal_nan=True)
    torch.testing.assert_close(s.cpu(), es.float(), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_states, d", [(2, 128), (5, 8), (40, 6), (3, 0)])
def test_merge_rules_for_empty_nan_and_infinite_states(dtype, num_states, d):
    """An empty state's NaN v never leaks in; a NaN or +inf LSE never merges to a row that
    looks valid. (d = 6: one column per lane; 40 states: several batches per warp; d = 0:
    the merged LSE alone.)"""
    v, s = _special_states(257, num_states, 4, d, dtype, seed=num_states)
    ev, es = ref_cascade.merge_states(v.cpu(), s.cpu(), torch.float64)
    assert torch.isnan(es).any() and torch.isneginf(es).any() and torch.isfinite(es).any()
    _close_with_nan(*aotinfer.merge_states(v, s), ev, es, dtype)
    if num_states == 2:
        _close_with_nan(*aotinfer.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1]), ev, es, dtype)
        base_v, base_s = v[:, 0].clone(), s[:, 0].clone()
        aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1])
        _close_with_nan(base_v, base_s, ev, es, dtype)


def test_merge_in_place_captured_in_a_graph():
    v, s = _states(64, 2, 8, 128, torch.float16, seed=9, neg_inf=False)
    base_v = torch.empty(64, 8, 128, dtype=torch.float16, device=DEV)
    base_s = torch.empty(64, 8, device=DEV)
    mask = torch.zeros(64, dtype=torch.bool, device=DEV)
    base_v.copy_(v[:, 0])
    base_s.copy_(s[:, 0])
    aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1], mask=mask)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1], mask=mask)
    ev, es = ref_cascade.merge_states(v, s, torch.float64)
    for fraction in (0.0, 0.3, 1.0):
        base_v.copy_(v[:, 0])
        base_s.copy_(s[:, 0])
        mask.copy_(torch.rand(64, generator=_gen(int(fraction * 10)), device=DEV) < fraction)
        graph.replay()
        torch.cuda.synchronize()
        _close(base_v[mask], base_s[mask], ev[mask], es[mask], torch.float16)
        assert torch.equal(base_v[~mask], v[~mask, 0])
