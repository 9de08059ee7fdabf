"""Paged-KV utilities and merging of attention states on CPU tensors: against FlashInfer's
documented examples, plain loops and float64 formulas; the provider path through the
simulated provider of decode_contract.py."""

from __future__ import annotations

import math
import re

import decode_contract
import pytest
import torch

import aotinfer
from aotinfer.reference import cascade as ref_cascade
from aotinfer.reference import page as ref_page

F64 = torch.float64


def _randn(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


# ---------------------------------------------------------------- get_seq_lens / positions


def test_get_seq_lens():
    indptr = torch.tensor([0, 3, 4, 4, 9], dtype=torch.int32)
    last = torch.tensor([5, 16, 7, 1], dtype=torch.int32)
    got = aotinfer.get_seq_lens(indptr, last, 16)
    assert got.tolist() == [37, 16, 7, 65]  # an empty request counts its last_page_len
    assert got.tolist() == ref_page.get_seq_lens(indptr, last, 16).tolist()


def test_get_seq_lens_checks_its_arguments():
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    # One last_page_len for a batch of two would broadcast in FlashInfer's one-liner.
    with pytest.raises(ValueError, match=r"kv_last_page_len must have batch_size = .* = 2 "):
        aotinfer.get_seq_lens(i32(0, 3, 4), i32(5), 16)
    with pytest.raises(ValueError, match="kv_indptr must have dtype int32, int64, got float32"):
        aotinfer.get_seq_lens(torch.tensor([0.0, 3.0, 4.0]), i32(5, 16), 16)
    with pytest.raises(ValueError, match="kv_indptr must be a torch.Tensor, got list"):
        aotinfer.get_seq_lens([0, 3, 4], i32(5, 16), 16)
    for bad in (0, -16, 16.0, True):
        with pytest.raises(ValueError, match=f"page_size must be a positive int, got {bad!r}"):
            aotinfer.get_seq_lens(i32(0, 3, 4), i32(5, 16), bad)


def test_get_batch_indices_positions_leaves_slots_before_indptr_0_empty():
    # FlashInfer's kernel writes only [indptr[0], indptr[-1]): slots 0-1 stay -1 / 0.
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    b, p = aotinfer.get_batch_indices_positions(i32(2, 3, 5), i32(5, 5), 5)
    assert b.tolist() == [-1, -1, 0, 1, 1] and p.tolist() == [0, 0, 4, 3, 4]
    want = ref_page.get_batch_indices_positions(i32(2, 3, 5), i32(5, 5), 5)
    assert b.tolist() == want[0].tolist() and p.tolist() == want[1].tolist()


def test_get_batch_indices_positions_documented_example():
    indptr = torch.tensor([0, 1, 3, 6, 10], dtype=torch.int32)
    b, p = aotinfer.get_batch_indices_positions(indptr, torch.tensor([5, 5, 5, 5]), 10)
    assert b.dtype == p.dtype == torch.int32
    assert b.tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert p.tolist() == [4, 3, 4, 2, 3, 4, 1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(5))
def test_get_batch_indices_positions_against_loops(seed):
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 6, (7,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
    seq_lens = counts + torch.randint(0, 50, (7,), generator=g)
    nnz = int(indptr[-1]) + seed  # extra slots get -1 / 0
    got = aotinfer.get_batch_indices_positions(indptr, seq_lens, nnz)
    want = ref_page.get_batch_indices_positions(indptr, seq_lens, nnz)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    b_buf = torch.full((nnz,), 99, dtype=torch.int32)
    p_buf = torch.full((nnz,), 99, dtype=torch.int32)
    res = aotinfer.get_batch_indices_positions(indptr, seq_lens, nnz, b_buf, p_buf)
    assert res[0] is b_buf and res[1] is p_buf and b_buf.tolist() == want[0].tolist()


def test_get_batch_indices_positions_errors():
    indptr = torch.tensor([0, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"Invalid shape of batch_indices: expected \(2,\)"):
        aotinfer.get_batch_indices_positions(
            indptr, torch.tensor([3]), 2, torch.zeros(3, dtype=torch.int32)
        )
    with pytest.raises(ValueError, match="Invalid dtype of positions"):
        aotinfer.get_batch_indices_positions(
            indptr, torch.tensor([3]), 2, None, torch.zeros(2, dtype=torch.int64)
        )
    with pytest.raises(ValueError, match="seq_lens must have batch_size"):
        aotinfer.get_batch_indices_positions(indptr, torch.tensor([3, 4]), 2)
    with pytest.raises(ValueError, match="append_indptr must have dtype"):
        aotinfer.get_batch_indices_positions(indptr.float(), torch.tensor([3]), 2)


# ---------------------------------------------------------------- append


def _cache(layout, pages, ps, hkv, d, dtype, tuple_cache, seed=0):
    shape = (pages, 2, ps, hkv, d) if layout == "NHD" else (pages, 2, hkv, ps, d)
    c = _randn(shape, seed, torch.float32).to(dtype)
    return (c[:, 0].clone(), c[:, 1].clone()) if tuple_cache else c


def _halves(cache):
    return cache if isinstance(cache, tuple) else (cache[:, 0], cache[:, 1])


def _append_case(layout, tuple_cache, dtype=torch.float16, ps=4, seed=0, d=8):
    """Three requests with 2, 0 and 5 existing tokens each appending 3, 4 and 1 tokens."""
    hkv = 2
    old, new = [2, 0, 5], [3, 4, 1]
    seq = [o + n for o, n in zip(old, new)]
    pages = [-(-s // ps) for s in seq]
    total = sum(pages) + 2
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[: sum(pages)]
    kv_indices = perm.to(torch.int32)
    kv_indptr = torch.tensor([0] + pages).cumsum(0).to(torch.int32)
    last = torch.tensor([s - (p - 1) * ps for s, p in zip(seq, pages)], dtype=torch.int32)
    append_indptr = torch.tensor([0] + new).cumsum(0).to(torch.int32)
    nnz = sum(new)
    k = _randn((nnz, hkv, d), seed + 1).to(dtype)
    v = _randn((nnz, hkv, d), seed + 2).to(dtype)
    cache = _cache(layout, total, ps, hkv, d, dtype, tuple_cache, seed + 3)
    return dict(
        k=k,
        v=v,
        cache=cache,
        kv_indices=kv_indices,
        kv_indptr=kv_indptr,
        last=last,
        append_indptr=append_indptr,
        seq=seq,
        new=new,
        ps=ps,
        nnz=nnz,
    )


def _append(c, layout):
    seq_lens = aotinfer.get_seq_lens(c["kv_indptr"], c["last"], c["ps"])
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"])
    aotinfer.append_paged_kv_cache(
        c["k"],
        c["v"],
        b,
        p,
        c["cache"],
        c["kv_indices"],
        c["kv_indptr"],
        c["last"],
        kv_layout=layout,
    )


def _check_appended(c, layout):
    kc, vc = _halves(c["cache"])
    t = 0
    for b, (s, n) in enumerate(zip(c["seq"], c["new"])):
        for pos in range(s - n, s):
            page = int(c["kv_indices"][int(c["kv_indptr"][b]) + pos // c["ps"]])
            slot = pos % c["ps"]
            got_k = kc[page, slot] if layout == "NHD" else kc[page, :, slot]
            got_v = vc[page, slot] if layout == "NHD" else vc[page, :, slot]
            assert torch.equal(got_k, c["k"][t]) and torch.equal(got_v, c["v"][t])
            t += 1


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("tuple_cache", [False, True])
def test_append_writes_where_the_page_table_says(layout, tuple_cache):
    c = _append_case(layout, tuple_cache)
    before = [t.clone() for t in _halves(c["cache"])]
    _append(c, layout)
    _check_appended(c, layout)
    changed = sum(int((a != b).any(-1).sum()) for a, b in zip(before, _halves(c["cache"])))
    assert changed <= 2 * c["nnz"] * 2  # nothing but the appended slots (k and v, 2 heads)


def test_outputs_carry_no_gradient_and_in_place_ones_are_written_as_the_kernels_write():
    """The kernels write through the pointer, outside autograd; the CPU path did raise
    torch's leaf in-place error there, naming no argument (README, torch.compile)."""
    c = _append_case("NHD", False)
    c["cache"] = c["cache"].float().requires_grad_()
    c["k"], c["v"] = c["k"].float(), c["v"].float()
    _append(c, "NHD")
    _check_appended(c, "NHD")
    v = _randn((4, 3, 2, 8), 1)
    s = _randn((4, 3, 2), 2, scale=3.0)
    base_v = v[:, 0].clone().requires_grad_()
    base_s = s[:, 0].clone().requires_grad_()
    aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1])
    ev, es = _direct_merge([v[:, 0], v[:, 1]], [s[:, 0], s[:, 1]])
    torch.testing.assert_close(base_v.detach().to(F64), ev)
    torch.testing.assert_close(base_s.detach().to(F64), es)
    # and the merges' new outputs carry no gradient, as on the GPU path
    v.requires_grad_()
    for out in (
        *aotinfer.merge_states(v, s),
        *aotinfer.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1]),
    ):
        assert not out.requires_grad and out.grad_fn is None


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_skips_what_the_page_table_cannot_place(layout):
    """As the kernel: the -1 padding slots of get_batch_indices_positions, negative
    positions, positions past a request's pages and page ids outside the cache are skipped,
    never written (no IndexError halfway, no write into another request's page)."""
    c = _append_case(layout, tuple_cache=False)
    seq_lens = aotinfer.get_seq_lens(c["kv_indptr"], c["last"], c["ps"])
    nnz = c["nnz"]
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, nnz + 3)
    assert b[nnz:].tolist() == [-1, -1, -1]  # padding
    hkv, d = c["k"].shape[1:]
    # Five bad tokens after the padding: negative position, past request 0's pages, batch
    # index past the batch, and request 2's last page pointing outside the cache (below).
    b = torch.cat([b, torch.tensor([1, 0, 3, 2], dtype=torch.int32)])
    p = torch.cat([p, torch.tensor([-1, 4 * c["ps"], 0, c["seq"][2] - 1], dtype=torch.int32)])
    k = torch.cat([c["k"], _randn((7, hkv, d), 9).to(c["k"].dtype)])
    v = torch.cat([c["v"], _randn((7, hkv, d), 10).to(c["v"].dtype)])
    indices = c["kv_indices"].clone()
    indices[-1] = c["cache"].size(0) + 5  # request 2's last page: outside the cache
    before = c["cache"].clone()
    aotinfer.append_paged_kv_cache(
        k, v, b, p, c["cache"], indices, c["kv_indptr"], c["last"], kv_layout=layout
    )
    # Exactly the placeable tokens landed: those of requests 0 and 1 (request 2's one new
    # token sits on its last page, which now points outside the cache).
    c["seq"], c["new"] = c["seq"][:2], c["new"][:2]
    _check_appended(c, layout)
    changed = int((before != c["cache"]).any(-1).sum())
    assert changed == 2 * hkv * sum(c["new"])  # k and v, every head, nothing else


def test_append_accepts_strided_keys_and_then_decode_reads_them():
    c = _append_case("NHD", False, ps=4, d=64)
    fused = torch.zeros(c["nnz"], 3, 2, 64, dtype=torch.float16)
    fused[:, 1], fused[:, 2] = c["k"], c["v"]
    c["k"], c["v"] = fused[:, 1], fused[:, 2]
    assert not c["k"].is_contiguous()
    _append(c, "NHD")
    _check_appended(c, "NHD")
    # decode over the grown cache: the appended keys are the newest ones
    q = _randn((3, 4, 64), 9).half()
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(torch.zeros(1 << 20, dtype=torch.uint8))
    w.plan(c["kv_indptr"], c["kv_indices"], c["last"], 4, 2, 64, 4)
    out = w.run(q, c["cache"])
    kc, vc = _halves(c["cache"])
    t = 0
    for b, (s, n) in enumerate(zip(c["seq"], c["new"])):
        ids = c["kv_indices"][int(c["kv_indptr"][b]) : int(c["kv_indptr"][b + 1])].long()
        keys, vals = kc[ids].reshape(-1, 2, 64)[:s], vc[ids].reshape(-1, 2, 64)[:s]
        assert torch.equal(keys[s - n :], c["k"][t : t + n])
        t += n
        want = aotinfer.single_decode_with_kv_cache(q[b], keys, vals)
        torch.testing.assert_close(out[b], want, rtol=1e-3, atol=1e-3)


def _append_error_case():
    """An NHD append case, its cache halves, the page-table arguments and zero indices."""
    c = _append_case("NHD", False)
    args = (c["kv_indices"], c["kv_indptr"], c["last"])
    return c, _halves(c["cache"]), args, torch.zeros(c["nnz"], dtype=torch.int32)


def test_append_errors():
    c, (kc, _), args, b = _append_error_case()
    with pytest.raises(KeyError, match="Invalid kv_layout NDH"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, c["cache"], *args, kv_layout="NDH")
    with pytest.raises(
        ValueError, match="append_key has dtype float32 but the cache holds float16"
    ):
        aotinfer.append_paged_kv_cache(c["k"].float(), c["v"].float(), b, b, c["cache"], *args)
    with pytest.raises(
        ValueError,
        match=r"append_key must have shape \(nnz, num_kv_heads, head_dim\) = \(8, 2, 8\)",
    ):
        aotinfer.append_paged_kv_cache(c["k"][..., :4], c["v"], b, b, c["cache"], *args)
    with pytest.raises(ValueError, match="batch_indices must have at least 8 entries"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b[:3], b, c["cache"], *args)
    with pytest.raises(KeyError, match="Unrecognized paged_kv_cache type"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, [kc], *args)
    with pytest.raises(ValueError, match="paged_kv_cache dtype int8 is not supported"):
        k8 = c["k"].to(torch.int8)
        aotinfer.append_paged_kv_cache(k8, k8, b, b, c["cache"].to(torch.int8), *args)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_provider_path(monkeypatch, layout):
    fake = decode_contract.install(monkeypatch)
    c = _append_case(layout, False, dtype=torch.bfloat16)
    _append(c, layout)
    _check_appended(c, layout)
    name, args = fake.calls[-1]
    assert name == "append_paged_kv_cache" and args["page_size"] == 4
    assert args["kv_layout"] == (0 if layout == "NHD" else 1)


# ---------------------------------------------------------------- merge


def _direct_merge(vs, ss):
    """Base-2 merge written out per row and head, float64."""
    vs, ss = [v.to(F64) for v in vs], [s.to(F64) for s in ss]
    n, h, d = vs[0].shape
    out_v = torch.zeros(n, h, d, dtype=F64)
    out_s = torch.zeros(n, h, dtype=F64)
    for i in range(n):
        for j in range(h):
            lses = [float(s[i, j]) for s in ss]
            m = max(lses)
            if m == -math.inf:
                out_s[i, j] = -math.inf
                continue
            w = [2.0 ** (x - m) for x in lses]
            out_v[i, j] = sum(wk * v[i, j] for wk, v in zip(w, vs)) / sum(w)
            out_s[i, j] = m + math.log2(sum(w))
    return out_v, out_s


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_merge_state(dtype):
    va, vb = _randn((5, 3, 8), 1, dtype), _randn((5, 3, 8), 2, dtype)
    sa, sb = _randn((5, 3), 3, scale=4.0), _randn((5, 3), 4, scale=4.0)
    sa[0, 0] = -math.inf  # one side saw no key
    v, s = aotinfer.merge_state(va, sa, vb, sb)
    assert v.dtype == dtype and s.dtype == torch.float32
    ev, es = _direct_merge([va, vb], [sa, sb])
    tol = 1e-2 if dtype != torch.float32 else 1e-6
    torch.testing.assert_close(v.to(F64), ev, rtol=tol, atol=tol)
    torch.testing.assert_close(s.to(F64), es, rtol=1e-6, atol=1e-6)


def test_merge_both_empty_gives_zero_and_minus_inf():
    v = _randn((2, 1, 4), 1)
    s = torch.full((2, 1), -math.inf)
    mv, ms = aotinfer.merge_state(v, s, v, s)
    assert (mv == 0).all() and torch.isneginf(ms).all()


def _special_states():
    """Two states per (row, head) for the rules of reference/cascade.py, in five rows: an
    empty state whose v is NaN beside a valid one, a NaN LSE, a +inf LSE, both empty, and a
    valid state whose v is NaN under a weight that underflows to 0."""
    v = _randn((5, 2, 3, 8), 1)
    s = _randn((5, 2, 3), 2, scale=3.0)
    s[0, 0], v[0, 0] = -math.inf, math.nan
    s[1, 1, 0] = math.nan
    s[2, 0, 1] = math.inf
    s[3] = -math.inf
    s[4, 0], s[4, 1], v[4, 1] = 0.0, -300.0, math.nan
    return v, s


def _check_special(v, s, mv, ms):
    """The merged rows of _special_states, checked against the rules."""
    ev, es = _direct_merge([v[0, 1:]], [s[0, 1:]])  # the empty state and its NaN v are skipped
    torch.testing.assert_close(mv[0].to(F64), ev[0])
    torch.testing.assert_close(ms[0].to(F64), es[0])
    for row, head in ((1, 0), (2, 1)):  # NaN or +inf LSE: v and s NaN, that head alone
        assert torch.isnan(mv[row, head]).all() and torch.isnan(ms[row, head])
        others = [h for h in range(3) if h != head]
        assert torch.isfinite(mv[row, others]).all() and torch.isfinite(ms[row, others]).all()
    assert (mv[3] == 0).all() and torch.isneginf(ms[3]).all()
    assert torch.isnan(mv[4]).all() and torch.isfinite(ms[4]).all()


def test_merge_rules_for_empty_nan_and_infinite_states():
    v, s = _special_states()
    mv, ms = aotinfer.merge_states(v, s)
    _check_special(v, s, mv, ms)
    mv, ms = aotinfer.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    _check_special(v, s, mv, ms)
    base_v, base_s = v[:, 0].clone(), s[:, 0].clone()
    aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1])
    _check_special(v, s, base_v, base_s)


def test_merge_states_and_in_place_with_mask():
    v = _randn((4, 3, 2, 8), 1)
    s = _randn((4, 3, 2), 2, scale=3.0)
    mv, ms = aotinfer.merge_states(v, s)
    ev, es = _direct_merge(list(v.unbind(1)), list(s.unbind(1)))
    torch.testing.assert_close(mv.to(F64), ev)
    torch.testing.assert_close(ms.to(F64), es)
    base_v, base_s = v[:, 0].clone(), s[:, 0].clone()
    mask = torch.tensor([True, False, True, False])
    aotinfer.merge_state_in_place(base_v, base_s, v[:, 1], s[:, 1], mask)
    ev2, es2 = _direct_merge([v[:, 0], v[:, 1]], [s[:, 0], s[:, 1]])
    for i, keep in enumerate(mask.tolist()):
        if keep:
            torch.testing.assert_close(base_v[i].to(F64), ev2[i])
            torch.testing.assert_close(base_s[i].to(F64), es2[i])
        else:
            assert torch.equal(base_v[i], v[i, 0]) and torch.equal(base_s[i], s[i, 0])


def test_merge_errors():
    v, s = _randn((4, 2, 8), 1), _randn((4, 2), 2)
    with pytest.raises(ValueError, match=r"s_b must have shape \(4, 2\)"):
        aotinfer.merge_state(v, s, v, s[:3])
    with pytest.raises(ValueError, match="v_b must have dtype float32"):
        aotinfer.merge_state(v, s, v.half(), s)
    with pytest.raises(ValueError, match="s must be float32"):
        aotinfer.merge_state_in_place(v, s.double(), v, s)
    with pytest.raises(ValueError, match="mask must have dtype bool"):
        aotinfer.merge_state_in_place(v, s, v, s, torch.ones(4))
    with pytest.raises(ValueError, match="mask must have seq_len = 4 entries"):
        aotinfer.merge_state_in_place(v, s, v, s, torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="v must be a 4-D tensor"):
        aotinfer.merge_states(v, s)
    with pytest.raises(ValueError, match="v_a must have dtype float16, bfloat16, float32"):
        aotinfer.merge_state(v.double(), s, v.double(), s)
    with pytest.raises(ValueError, match=r"v must hold num_states >= 1 states to merge, got "):
        aotinfer.merge_states(_randn((5, 0, 4, 16), 3), _randn((5, 0, 4), 4))


def test_merge_provider_path(monkeypatch):
    fake = decode_contract.install(monkeypatch)
    va, vb = _randn((5, 3, 8), 1, torch.float16), _randn((5, 3, 8), 2, torch.float16)
    sa, sb = _randn((5, 3), 3), _randn((5, 3), 4)
    v, s = aotinfer.merge_state(va, sa, vb, sb)
    ev, es = ref_cascade.merge_state(va, sa, vb, sb)
    torch.testing.assert_close(v.float(), ev, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(s, es)
    assert fake.calls[-1][0] == "merge_state_in_place" and fake.calls[-1][1]["mask"] is None
    vm, sm = aotinfer.merge_states(torch.stack([va, vb], 1), torch.stack([sa, sb], 1).double())
    assert fake.calls[-1][0] == "merge_states" and vm.dtype == torch.float16
    torch.testing.assert_close(vm.float(), ev, rtol=1e-3, atol=1e-3)
    mask = torch.tensor([True, False, True, True, False])
    aotinfer.merge_state_in_place(va, sa, vb, sb, mask)
    assert fake.calls[-1][1]["mask"] is mask
    # state a is copied before the in-place merge: the copy must not carry a gradient
    for out in aotinfer.merge_state(va.requires_grad_(), sa.requires_grad_(), vb, sb):
        assert not out.requires_grad and out.grad_fn is None


def test_append_saturates_int64_indices_instead_of_wrapping():
    """int64 batch indices, positions, page ids or indptr past int32 are skipped, as any
    out-of-range value is, not wrapped into another slot (2**32 + 1 used to become 1)."""
    c = _append_case("NHD", False)
    before = c["cache"].clone()
    seq_lens = aotinfer.get_seq_lens(c["kv_indptr"], c["last"], c["ps"])
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"])
    wraps = 2**32 + 1
    for name, bi, pos, idx in [
        ("batch index", b.long() + wraps, p.long(), c["kv_indices"]),
        ("negative batch index", b.long() - wraps, p.long(), c["kv_indices"]),
        ("position", b.long(), p.long() + 2**32, c["kv_indices"]),
        ("page id", b.long(), p.long(), c["kv_indices"].long() + 2**32),
    ]:
        aotinfer.append_paged_kv_cache(
            c["k"], c["v"], bi, pos, c["cache"], idx, c["kv_indptr"], c["last"]
        )
        assert torch.equal(c["cache"], before), name


def test_positions_saturate_and_seq_lens_must_be_integers():
    indptr = torch.tensor([0, 2], dtype=torch.int32)
    b, p = aotinfer.get_batch_indices_positions(indptr, torch.tensor([2**40]), 2)
    assert b.tolist() == [0, 0] and p.tolist() == [2**31 - 1, 2**31 - 1]
    with pytest.raises(ValueError, match="seq_lens must have dtype int32, int64, got float32"):
        aotinfer.get_batch_indices_positions(indptr, torch.tensor([5.7]), 2)


def test_append_refuses_a_cache_of_page_size_0():
    """The kernel divides positions by the page size (a division by zero on the GPU, then a
    write into a cache of no elements)."""
    c = _append_case("NHD", True)
    k0 = torch.empty(4, 0, 2, 8, dtype=torch.float16)
    with pytest.raises(
        ValueError, match="paged_kv_cache must have a page_size >= 1 \\(NHD\\), got 0"
    ):
        aotinfer.append_paged_kv_cache(
            c["k"][:1], c["v"][:1], torch.zeros(1, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32), (k0, k0.clone()), c["kv_indices"],
            c["kv_indptr"], c["last"],
        )  # fmt: skip


def test_merges_refuse_more_heads_than_a_grid_holds():
    """The merge kernels launch a block per (position, head), heads in grid.y (65535)."""
    v, s = torch.zeros(1, 65536, 4), torch.zeros(1, 65536)
    with pytest.raises(ValueError, match="v_a has 1 positions and 65536 heads; the merge"):
        aotinfer.merge_state(v, s, v, s)
    with pytest.raises(ValueError, match="v has 1 positions and 65536 heads"):
        aotinfer.merge_states(v[:, None], s[:, None])
    out, lse = aotinfer.merge_state(v[:, :65535], s[:, :65535], v[:, :65535], s[:, :65535])
    assert out.shape == (1, 65535, 4)


# ---------------------------------------------------------------- edges


def test_page_utilities_refuse_empty_indptrs_and_bad_nnz():
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    with pytest.raises(
        ValueError, match="kv_indptr must have batch_size \\+ 1 >= 1 entries, got 0"
    ):
        aotinfer.get_seq_lens(i32(), i32(), 16)
    with pytest.raises(
        ValueError, match="append_indptr must have batch_size \\+ 1 >= 1 entries, got 0"
    ):
        aotinfer.get_batch_indices_positions(i32(), i32(), 2)
    for bad in (-1, 2.0, True, "3", 2**31, 2**62):  # (2**62 once failed in torch's allocator)
        with pytest.raises(
            ValueError, match=re.escape(f"nnz must be an int in [0, 2**31), got {bad!r}")
        ):
            aotinfer.get_batch_indices_positions(i32(0, 2), i32(3), bad)
    with pytest.raises(ValueError, match="batch_indices must be a torch.Tensor, got list"):
        aotinfer.get_batch_indices_positions(i32(0, 2), i32(3), 2, [0, 0])


def test_get_batch_indices_positions_of_an_empty_batch_fills_padding():
    """A batch of no requests (append_indptr [0]): every slot is padding, -1 / 0, into the
    caller's buffers too; as the reference."""
    indptr, seq_lens = torch.tensor([0], dtype=torch.int32), torch.zeros(0, dtype=torch.int32)
    b, p = aotinfer.get_batch_indices_positions(indptr, seq_lens, 3)
    assert b.tolist() == [-1, -1, -1] and p.tolist() == [0, 0, 0]
    assert b.dtype == p.dtype == torch.int32
    want = ref_page.get_batch_indices_positions(indptr, seq_lens, 3)
    assert b.tolist() == want[0].tolist() and p.tolist() == want[1].tolist()
    b_buf, p_buf = torch.full((3,), 9, dtype=torch.int32), torch.full((3,), 9, dtype=torch.int32)
    res = aotinfer.get_batch_indices_positions(indptr, seq_lens, 3, b_buf, p_buf)
    assert res[0] is b_buf and res[1] is p_buf
    assert b_buf.tolist() == [-1, -1, -1] and p_buf.tolist() == [0, 0, 0]


def test_get_batch_indices_positions_with_fewer_slots_than_tokens():
    """nnz below append_indptr[-1]: the first nnz tokens only, in aotinfer and the
    reference alike."""
    indptr = torch.tensor([0, 2, 5], dtype=torch.int32)
    seq_lens = torch.tensor([4, 7], dtype=torch.int32)
    b, p = aotinfer.get_batch_indices_positions(indptr, seq_lens, 3)
    assert b.tolist() == [0, 0, 1] and p.tolist() == [2, 3, 4]
    want = ref_page.get_batch_indices_positions(indptr, seq_lens, 3)
    assert b.tolist() == want[0].tolist() and p.tolist() == want[1].tolist()


def test_append_refuses_mismatched_halves_and_devices():
    c, (kc, vc), args, b = _append_error_case()
    with pytest.raises(ValueError, match="append_value must be on cpu like append_key, got meta"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"].to("meta"), b, b, c["cache"], *args)
    with pytest.raises(ValueError, match="append_value must be a torch.Tensor, got NoneType"):
        aotinfer.append_paged_kv_cache(c["k"], None, b, b, c["cache"], *args)
    with pytest.raises(ValueError, match="append_value must be a 3-D tensor, got 2-D"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"][0], b, b, c["cache"], *args)
    with pytest.raises(
        ValueError,
        match=re.escape("paged_kv_cache (k half) must be on cpu like append_key, got meta"),
    ):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, c["cache"].to("meta"), *args)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the k and v halves of paged_kv_cache must have the same shape and dtype, got "
            f"{tuple(kc.shape)} float16 and {tuple(vc[:2].shape)} float16"
        ),
    ):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, (kc, vc[:2]), *args)
    with pytest.raises(ValueError, match="got .* float16 and .* float32"):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, (kc, vc.float()), *args)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"each half of paged_kv_cache must be 4-D, got shape {tuple(kc[:, 0].shape)}"
        ),
    ):
        aotinfer.append_paged_kv_cache(c["k"], c["v"], b, b, (kc[:, 0], vc[:, 0]), *args)


@pytest.mark.parametrize("provider", [False, True])
def test_append_of_no_tokens_leaves_the_cache_alone(monkeypatch, provider):
    fake = decode_contract.install(monkeypatch) if provider else None
    c = _append_case("NHD", False)
    before = c["cache"].clone()
    none = torch.zeros(0, dtype=torch.int32)
    aotinfer.append_paged_kv_cache(
        c["k"][:0], c["v"][:0], none, none, c["cache"], c["kv_indices"], c["kv_indptr"], c["last"]
    )
    assert torch.equal(c["cache"], before)
    assert fake is None or fake.calls == []  # nothing launched


def test_append_provider_path_refuses_a_cache_without_a_contiguous_last_dim(monkeypatch):
    """The kernel writes head_dim rows: either half with a strided last dimension is refused
    with its strides before any launch (the v half was left to the provider's check)."""
    fake = decode_contract.install(monkeypatch)
    c = _append_case("NHD", True)
    kc, vc = c["cache"]
    strided_v = vc.transpose(-1, -2).contiguous().transpose(-1, -2)
    seq_lens = aotinfer.get_seq_lens(c["kv_indptr"], c["last"], c["ps"])
    b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"])
    for cache in ((kc, strided_v), (strided_v, kc)):
        with pytest.raises(
            ValueError,
            match=re.escape("paged_kv_cache must have a contiguous last (head_dim) dimension, got")
            + ".* \\(k and v halves\\)",
        ):
            aotinfer.append_paged_kv_cache(
                c["k"], c["v"], b, p, cache, c["kv_indices"], c["kv_indptr"], c["last"]
            )
    assert fake.calls == []


def test_merge_errors_name_shapes_dtypes_and_strides():
    v, s = _randn((4, 2, 8), 1), _randn((4, 2), 2)
    with pytest.raises(ValueError, match="s_a must be a float tensor, got torch.int64"):
        aotinfer.merge_state(v, s.long(), v, s)
    with pytest.raises(ValueError, match="s_other must be a float tensor, got torch.int32"):
        aotinfer.merge_state_in_place(v, s, v, s.int())
    with pytest.raises(
        ValueError, match=re.escape("v_b must have v_a's shape (4, 2, 8), got (3, 2, 8)")
    ):
        aotinfer.merge_state(v, s, v[:3], s)
    with pytest.raises(
        ValueError, match=re.escape("v_other must have v's shape (4, 2, 8), got (4, 1, 8)")
    ):
        aotinfer.merge_state_in_place(v, s, v[:, :1], s)
    strided_v = v.transpose(0, 1).contiguous().transpose(0, 1)
    with pytest.raises(
        ValueError,
        match=re.escape("v must be contiguous (it is updated in place), got strides (8, 32, 1)"),
    ):
        aotinfer.merge_state_in_place(strided_v, s, v, s)
    with pytest.raises(
        ValueError,
        match=re.escape("s must be contiguous (it is updated in place), got strides (1, 4)"),
    ):
        aotinfer.merge_state_in_place(v, s.t().contiguous().t(), v, s)
