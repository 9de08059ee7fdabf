"""The reference decode attention against a direct float64 computation written out here
(loops over requests, query rows and heads; one key at a time where it reads clearer)."""

from __future__ import annotations

import math

import pytest
import torch

from aotinfer import _attention_utils
from aotinfer.reference import attention as ref
from aotinfer.reference import cascade as ref_cascade

F64 = torch.float64


def _randn(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def _rotate(x, pos, rope_scale, rope_theta):
    """Llama RoPE of one vector at one position: halves (x1, x2) rotated pairwise."""
    d = x.numel()
    half = d // 2
    y = torch.empty_like(x)
    for i in range(half):
        angle = pos / (rope_scale * rope_theta ** (2 * i / d))
        c, s = math.cos(angle), math.sin(angle)
        y[i] = x[i] * c - x[i + half] * s
        y[i + half] = x[i + half] * c + x[i] * s
    return y


def _slopes(h):
    """ALiBi slopes spelled out: 2**(-8k/n) for k=1..n, then 2**(-4k/n) for odd k."""
    n = 2 ** int(math.floor(math.log2(h)))
    out = [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]
    out += [2.0 ** (-4.0 * k / n) for k in range(1, 2 * (h - n), 2)]
    return torch.tensor(out, dtype=F64)


def direct(
    q,
    k,
    v,
    *,
    sm_scale,
    q_scale=1.0,
    k_scale=1.0,
    v_scale=1.0,
    cap=0.0,
    window=-1,
    mode="NONE",
    rope_scale=1.0,
    rope_theta=1e4,
    sinks=None,
):
    """q (Lq, Hq, D), k/v (Lk, Hkv, D) -> out (Lq, Hq, D), lse (Lq, Hq) base 2, float64."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    slopes = _slopes(hq).float().double()  # the slopes are float32 values
    out = torch.zeros(lq, hq, d, dtype=F64)
    lse = torch.zeros(lq, hq, dtype=F64)
    for r in range(lq):
        pos = lk - lq + r
        for h in range(hq):
            qv = _rotate(q[r, h], pos, rope_scale, rope_theta) if mode == "ROPE_LLAMA" else q[r, h]
            logits, values = [], []
            for j in range(lk):
                if j > pos or (window >= 0 and pos - j > window):
                    continue
                kv = k[j, h // group]
                if mode == "ROPE_LLAMA":
                    kv = _rotate(kv, j, rope_scale, rope_theta)
                s = float(qv @ kv) * sm_scale * q_scale * k_scale
                if cap > 0:
                    s = cap * math.tanh(s / cap)
                if mode == "ALIBI":
                    s += float(slopes[h]) * (j - pos)
                logits.append(s)
                values.append(v[j, h // group])
            terms = logits + ([float(sinks[h])] if sinks is not None else [])
            if not terms:
                lse[r, h] = -math.inf
                continue
            m = max(terms)
            den = sum(math.exp(t - m) for t in terms)
            acc = torch.zeros(d, dtype=F64)
            for s, val in zip(logits, values):
                acc += math.exp(s - m) * val
            out[r, h] = acc / den * v_scale
            lse[r, h] = (m + math.log(den)) / math.log(2.0)
    return out, lse


def _paged(k, v, page_size, layout, seed, extra_pages=3):
    """Scatter one request's K/V (Lk, Hkv, D) into a shuffled paged cache; returns the cache
    halves and the page ids in order."""
    lk, hkv, d = k.shape
    n = -(-lk // page_size)
    total = n + extra_pages
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:n]
    kc = (
        _randn((total, page_size, hkv, d), seed + 1, k.dtype)
        if k.dtype != torch.float8_e4m3fn
        else torch.zeros((total, page_size, hkv, d), dtype=k.dtype)
    )
    vc = torch.zeros_like(kc)
    for i, p in enumerate(perm.tolist()):
        rows = slice(i * page_size, min((i + 1) * page_size, lk))
        cnt = rows.stop - rows.start
        kc[p, :cnt] = k[rows]
        vc[p, :cnt] = v[rows]
    if layout == "HND":
        kc, vc = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
    return kc, vc, perm


def test_alibi_slopes_match_the_formula():
    for h in (1, 2, 8, 12, 32, 40, 64):
        torch.testing.assert_close(
            _attention_utils.get_alibi_slopes(h), _slopes(h).float(), rtol=0, atol=0
        )
    assert _attention_utils.get_alibi_slopes(8).dtype == torch.float32


def test_rope_matches_the_pairwise_rotation():
    x = _randn((5, 3, 16), 1, F64)
    pos = torch.tensor([0, 1, 7, 100, 4095])
    y = ref.rope_llama(x, pos, 2.0, 500.0)
    for i in range(5):
        for h in range(3):
            expect = _rotate(x[i, h], int(pos[i]), 2.0, 500.0)
            torch.testing.assert_close(y[i, h], expect, rtol=1e-12, atol=1e-12)


CASES = [
    # (hq, hkv, d, lq, lk, options)
    (8, 2, 16, 1, 37, {}),
    (4, 4, 16, 1, 1, {}),
    (6, 2, 8, 1, 20, {"mode": "ROPE_LLAMA", "rope_scale": 2.0, "rope_theta": 1e3}),
    (8, 1, 8, 1, 25, {"mode": "ALIBI"}),
    (12, 4, 8, 1, 19, {"mode": "ALIBI"}),
    (4, 2, 8, 1, 30, {"cap": 2.5}),
    (4, 2, 8, 1, 30, {"window": 7}),
    (4, 2, 8, 1, 30, {"window": 0}),
    (4, 2, 8, 1, 9, {"window": 100}),
    (4, 2, 8, 1, 12, {"sinks": True}),
    (4, 2, 8, 2, 12, {}),
    (4, 2, 8, 4, 15, {"mode": "ROPE_LLAMA", "window": 5, "sinks": True}),
    (4, 1, 8, 4, 4, {"mode": "ALIBI", "cap": 10.0}),
    (4, 2, 8, 1, 10, {"q_scale": 0.5, "k_scale": 3.0, "v_scale": 0.25}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("compute", [F64, torch.float32])
def test_attention_against_direct(case, compute):
    hq, hkv, d, lq, lk, o = CASES[case]
    q = _randn((lq, hq, d), 10 + case, scale=1.5)
    k = _randn((lk, hkv, d), 20 + case)
    v = _randn((lk, hkv, d), 30 + case)
    sinks = _randn((hq,), 40 + case) if o.get("sinks") else None
    sm = 1.0 / math.sqrt(d)
    opts = {key: o[key] for key in ("q_scale", "k_scale", "v_scale") if key in o}
    expect_o, expect_l = direct(
        q,
        k,
        v,
        sm_scale=sm,
        cap=o.get("cap", 0.0),
        window=o.get("window", -1),
        mode=o.get("mode", "NONE"),
        rope_scale=o.get("rope_scale", 1.0),
        rope_theta=o.get("rope_theta", 1e4),
        sinks=sinks,
        **opts,
    )
    got_o, got_l = ref.attention(
        q,
        k,
        v,
        sm_scale=sm,
        logits_soft_cap=o.get("cap", 0.0),
        window_left=o.get("window", -1),
        pos_encoding_mode=o.get("mode", "NONE"),
        rope_scale=o.get("rope_scale", 1.0),
        rope_theta=o.get("rope_theta", 1e4),
        alibi_slopes=_attention_utils.get_alibi_slopes(hq),
        sinks=sinks,
        compute_dtype=compute,
        **opts,
    )
    tol = 1e-10 if compute == F64 else 2e-5
    assert got_o.dtype == compute and got_l.shape == (lq, hq)
    torch.testing.assert_close(got_o.to(F64), expect_o, rtol=tol, atol=tol)
    torch.testing.assert_close(got_l.to(F64), expect_l, rtol=tol, atol=tol)


def test_lse_is_base_2_logsumexp():
    q, k, v = _randn((1, 2, 8), 1), _randn((9, 2, 8), 2), _randn((9, 2, 8), 3)
    _, lse = ref.attention(q, k, v, sm_scale=0.3, compute_dtype=F64)
    logits = torch.einsum("hd,khd->hk", q[0].to(F64), k.to(F64)) * 0.3
    torch.testing.assert_close(lse[0], torch.logsumexp(logits, -1) / math.log(2.0))


def test_window_equals_slicing_the_last_keys():
    q, k, v = _randn((1, 4, 16), 5), _randn((50, 2, 16), 6), _randn((50, 2, 16), 7)
    for w in (0, 1, 9, 48, 49, 200):
        a = ref.attention(q, k, v, window_left=w, compute_dtype=F64)
        b = ref.attention(q, k[-(w + 1) :], v[-(w + 1) :], compute_dtype=F64)
        torch.testing.assert_close(a[0], b[0])
        torch.testing.assert_close(a[1], b[1])


def test_extreme_logits_stay_finite():
    q = _randn((2, 4, 8), 1, scale=1e3)
    k, v = _randn((40, 2, 8), 2, scale=30.0), _randn((40, 2, 8), 3)
    o, lse = ref.attention(q, k, v, sm_scale=1.0)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    eo, el = direct(q, k, v, sm_scale=1.0)
    torch.testing.assert_close(o.to(F64), eo, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.to(F64), el, rtol=1e-6, atol=1e-3)


def test_fp8_kv_is_dequantised_by_its_scales():
    q = _randn((1, 4, 16), 1)
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        k8, v8 = _randn((21, 2, 16), 2).to(dt), _randn((21, 2, 16), 3).to(dt)
        o, lse = ref.attention(q, k8, v8, k_scale=0.7, v_scale=1.3, compute_dtype=F64)
        eo, el = direct(q, k8.to(F64), v8.to(F64), sm_scale=0.25, k_scale=0.7, v_scale=1.3)
        torch.testing.assert_close(o, eo)
        torch.testing.assert_close(lse, el)


def test_key_range_states_merge_to_the_whole():
    q, k, v = _randn((2, 4, 8), 1), _randn((33, 2, 8), 2), _randn((33, 2, 8), 3)
    whole = ref.attention(q, k, v, window_left=20, compute_dtype=F64)
    parts = [
        ref.attention(q, k, v, window_left=20, key_range=(lo, lo + 8), compute_dtype=F64)
        for lo in range(0, 48, 8)
    ]
    assert torch.isneginf(parts[-1][1]).all() and (parts[-1][0] == 0).all()  # empty chunk
    vm, sm = ref_cascade.merge_states(
        torch.stack([p[0] for p in parts], 1), torch.stack([p[1] for p in parts], 1), F64
    )
    torch.testing.assert_close(vm, whole[0])
    torch.testing.assert_close(sm, whole[1])


def test_row_that_sees_nothing():
    q, k, v = _randn((1, 2, 8), 1), _randn((5, 1, 8), 2), _randn((5, 1, 8), 3)
    o, lse = ref.attention(q, k, v, key_range=(7, 9))
    assert (o == 0).all() and torch.isneginf(lse).all()
    sinks = torch.tensor([0.5, -1.0])
    o, lse = ref.attention(q, k, v, key_range=(7, 9), sinks=sinks, compute_dtype=F64)
    assert (o == 0).all()
    torch.testing.assert_close(lse[0], sinks.to(F64) / math.log(2.0))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("q_len", [1, 2])
def test_batch_decode_gathers_pages(layout, page_size, q_len):
    hq, hkv, d = 4, 2, 8
    lens = [q_len, 17, 5, 40]
    ks, vs, caches_k, caches_v, page_lists = [], [], [], [], []
    offset = 0
    for b, lk in enumerate(lens):
        k, v = _randn((lk, hkv, d), 100 + b), _randn((lk, hkv, d), 200 + b)
        kc, vc, perm = _paged(k, v, page_size, layout, seed=300 + b)
        ks.append(k)
        vs.append(v)
        caches_k.append(kc)
        caches_v.append(vc)
        page_lists.append(perm + offset)
        offset += kc.size(0)
    k_cache, v_cache = torch.cat(caches_k), torch.cat(caches_v)
    indptr = torch.tensor([0] + [len(p) for p in page_lists]).cumsum(0).to(torch.int32)
    indices = torch.cat(page_lists).to(torch.int32)
    last = torch.tensor(
        [lk - (len(p) - 1) * page_size for lk, p in zip(lens, page_lists)], dtype=torch.int32
    )
    q = _randn((len(lens) * q_len, hq, d), 7)
    out, lse = ref.batch_decode(
        q,
        k_cache,
        v_cache,
        indptr,
        indices,
        last,
        kv_layout=layout,
        q_len_per_req=q_len,
        sm_scale=0.4,
        compute_dtype=F64,
    )
    for b in range(len(lens)):
        rows = slice(b * q_len, (b + 1) * q_len)
        eo, el = direct(q[rows], ks[b], vs[b], sm_scale=0.4)
        torch.testing.assert_close(out[rows], eo)
        torch.testing.assert_close(lse[rows], el)


def test_single_decode_hnd_is_nhd_transposed():
    q, k, v = _randn((8, 16), 1), _randn((23, 2, 16), 2), _randn((23, 2, 16), 3)
    a = ref.single_decode(q, k, v, kv_layout="NHD", compute_dtype=F64)
    b = ref.single_decode(
        q, k.transpose(0, 1), v.transpose(0, 1), kv_layout="HND", compute_dtype=F64
    )
    eo, el = direct(q.unsqueeze(0), k, v, sm_scale=0.25)
    torch.testing.assert_close(a[0], eo[0])
    torch.testing.assert_close(b[0], eo[0])
    torch.testing.assert_close(a[1], el[0])


def test_attention_refuses_heads_that_do_not_group_and_alibi_without_slopes():
    q, k, v = _randn((1, 6, 8), 1), _randn((5, 4, 8), 2), _randn((5, 4, 8), 3)
    with pytest.raises(
        ValueError, match=r"num_qo_heads \(6\) must be a multiple of num_kv_heads \(4\)"
    ):
        ref.attention(q, k, v)
    with pytest.raises(ValueError, match="pos_encoding_mode ALIBI needs alibi_slopes"):
        ref.attention(q[:, :4], k, v, pos_encoding_mode="ALIBI")


@pytest.mark.parametrize("window", [-1, 0, 3])
def test_non_causal_attention_sees_later_keys_within_the_window(window):
    """causal=False drops the causal mask and keeps the window: row r (position Lk - Lq + r)
    sees keys j >= position - window_left, later keys included; that is a single query row
    over exactly those keys (which, at the last position, sees them all)."""
    lq, lk = 3, 10
    q, k, v = _randn((lq, 4, 8), 1), _randn((lk, 2, 8), 2), _randn((lk, 2, 8), 3)
    out, lse = ref.attention(q, k, v, causal=False, window_left=window, compute_dtype=F64)
    for r in range(lq):
        start = 0 if window < 0 else max(lk - lq + r - window, 0)
        eo, el = direct(q[r : r + 1], k[start:], v[start:], sm_scale=1 / math.sqrt(8))
        torch.testing.assert_close(out[r], eo[0])
        torch.testing.assert_close(lse[r], el[0])
