"""The sampling API on CPU tensors (the reference path): shapes, dtypes, return arity, kept
sets against a brute-force computation written here, the NaN contract, renormalisation,
masking, top_k, chain speculative sampling, and the samplers' output distributions
against the exact filtered distribution (chi-square with a bound from the sample count)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import aotinfer
from aotinfer.reference import sampling as ref
from aotinfer.reference import topk as ref_topk

NAN, INF = float("nan"), float("inf")
MODES = {"top_k": 1, "top_p": 2, "min_p": 3, "top_k_first": 4, "joint": 5}


# ----------------------------------------------------------------------------------------
# Helpers: inputs, brute-force kept sets, chi-square


def dyadic_probs(rows, vocab, seed, levels=8):
    """Probabilities that are multiples of 1/64 (exact sums, many ties, some zeros)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, levels, (rows, vocab), generator=g).to(torch.float32) / 64


def brute_kept(row, mode, k=0, top_p=1.0, min_p=0.0):
    """The kept set of one row, from the definitions, by looping over candidate values."""
    vals = [float(v) for v in row]
    part = {i: v for i, v in enumerate(vals) if math.isfinite(v) and v > 0}
    if not part:
        return set()
    V = len(vals)

    def mass_ge(t):
        return sum(v for v in part.values() if v >= t)

    def t_k():
        if not 1 <= k < V:
            return 0.0
        ordered = sorted(part.values(), reverse=True)
        return ordered[k - 1] if k <= len(ordered) else 0.0

    def t_p(base):
        p32 = float(np.float32(top_p))
        if not p32 < 1:
            return 0.0
        target = max(p32, 0.0) * base
        return max(t for t in set(part.values()) if mass_ge(t) >= target)

    if mode == "none":
        t = 0.0
    elif mode == "top_k":
        t = t_k()
    elif mode == "top_p":
        t = t_p(mass_ge(0.0))
    elif mode == "min_p":
        t = float(np.float32(min_p) * np.float32(max(part.values())))
    elif mode == "top_k_first":
        tk = t_k()
        t = max(tk, t_p(mass_ge(tk)))
    else:  # joint
        t = max(t_k(), t_p(mass_ge(0.0)))
    return {i for i, v in part.items() if v >= t}


def kept_sets(mask):
    return [set(torch.nonzero(r).flatten().tolist()) for r in mask]


def expected_distribution(probs_row, kept):
    p = torch.zeros(probs_row.numel(), dtype=torch.float64)
    for i in kept:
        p[i] = float(probs_row[i])
    return p / p.sum()


def assert_chi_square(tokens, expected, n):
    """Observed counts against n * expected; categories with < 5 expected draws are pooled.
    The bound df + 7 sqrt(2 df) + 10 is far above the p = 1e-6 quantile for any df, yet a
    biased sampler (a few percent off on one token at these counts) exceeds it by far."""
    counts = torch.bincount(tokens.long(), minlength=expected.numel()).double()
    assert counts[expected == 0].sum() == 0, "a token outside the kept set was drawn"
    e = expected * n
    big = e >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([e[big], e[~big].sum().reshape(1)])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    df = max(int(keep.sum()) - 1, 1)
    bound = df + 7 * math.sqrt(2 * df) + 10
    assert stat < bound, f"chi-square {stat:.1f} >= {bound:.1f} (df {df})"


def many(rows, n):
    """indices drawing n samples from each of `rows` rows."""
    return torch.arange(rows).repeat_interleave(n)


# ----------------------------------------------------------------------------------------
# Kept sets


@pytest.mark.parametrize("mode", ["none", *MODES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_mask_matches_brute_force(mode, seed):
    probs = dyadic_probs(6, 40, seed)
    probs[1, 3] = NAN
    probs[2, 5] = -0.25
    probs[3, 7] = INF
    probs[4] = 0.0  # nothing to keep
    k = torch.tensor([1, 3, 5, 40, 0, 7])
    top_p = torch.tensor([0.3, 0.5, 0.9, 1.0, 0.7, 0.05])
    min_p = torch.tensor([0.1, 0.5, 1.0, 0.25, 0.3, 0.9])
    mode_id = 0 if mode == "none" else MODES[mode]
    got = kept_sets(ref.kept_mask(probs, mode_id, k, top_p, min_p))
    for r in range(6):
        want = brute_kept(probs[r], mode, int(k[r]), float(top_p[r]), float(min_p[r]))
        assert got[r] == want, f"row {r}"


def test_top_k_keeps_ties_at_the_kth_value():
    probs = torch.tensor([[0.1, 0.3, 0.2, 0.3, 0.1]])
    assert kept_sets(ref.kept_mask(probs, 1, 1))[0] == {1, 3}
    assert kept_sets(ref.kept_mask(probs, 1, 3))[0] == {1, 2, 3}
    assert kept_sets(ref.kept_mask(probs, 1, 4))[0] == {0, 1, 2, 3, 4}


def test_per_row_parameters_that_mean_no_filter():
    probs = dyadic_probs(4, 16, 5, levels=6) + 1 / 64
    everything = [set(range(16))] * 4
    assert kept_sets(ref.kept_mask(probs, 1, torch.tensor([0, -3, 16, 99]))) == everything
    assert kept_sets(ref.kept_mask(probs, 2, 0, torch.tensor([1.0, 1.5, NAN, 1.0]))) == everything
    assert (
        kept_sets(ref.kept_mask(probs, 3, 0, 1.0, torch.tensor([0.0, -1.0, NAN, 1e-30])))[:3]
        == (everything[:3])
    )


# ----------------------------------------------------------------------------------------
# Shapes, dtypes, arity


def _probs(rows=4, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g) * 2, dim=-1)


SAMPLERS = {
    "sampling_from_probs": lambda p, **kw: aotinfer.sampling_from_probs(p, **kw),
    "top_p": lambda p, **kw: aotinfer.top_p_sampling_from_probs(p, 0.7, **kw),
    "top_k": lambda p, **kw: aotinfer.top_k_sampling_from_probs(p, 5, **kw),
    "min_p": lambda p, **kw: aotinfer.min_p_sampling_from_probs(p, 0.1, **kw),
    "top_k_top_p": lambda p, **kw: aotinfer.top_k_top_p_sampling_from_probs(p, 5, 0.7, **kw),
    "joint": lambda p, **kw: aotinfer.top_k_top_p_sampling_from_probs(
        p, 5, 0.7, filter_apply_order="joint", **kw
    ),
}


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("index_dtype", [None, torch.int32, torch.int64])
def test_sampler_shapes_dtypes_and_arity(name, index_dtype):
    probs = _probs()
    indices = None if index_dtype is None else torch.tensor([3, 0, 0, 2, 1, 3], dtype=index_dtype)
    batch = 4 if indices is None else 6
    out_dtype = torch.int32 if index_dtype is None else index_dtype
    samples = SAMPLERS[name](probs, indices=indices, seed=1, offset=0)
    assert isinstance(samples, torch.Tensor)
    assert samples.shape == (batch,) and samples.dtype == out_dtype
    samples2, valid = SAMPLERS[name](probs, indices=indices, seed=1, offset=0, return_valid=True)
    assert torch.equal(samples, samples2)
    assert valid.shape == (batch,) and valid.dtype == torch.bool and valid.all()


@pytest.mark.parametrize("index_dtype", [None, torch.int32, torch.int64])
def test_logits_samplers_shapes_dtypes_and_arity(index_dtype):
    logits = torch.randn(4, 50)
    indices = None if index_dtype is None else torch.tensor([1, 1, 2], dtype=index_dtype)
    batch = 4 if indices is None else 3
    out_dtype = torch.int32 if index_dtype is None else index_dtype
    for out in (
        aotinfer.sampling_from_logits(logits, indices),
        aotinfer.top_k_top_p_sampling_from_logits(logits, 5, 0.9, indices),
        aotinfer.top_k_top_p_sampling_from_logits(
            logits, 5, 0.9, indices, filter_apply_order="joint"
        ),
    ):
        assert isinstance(out, torch.Tensor)
        assert out.shape == (batch,) and out.dtype == out_dtype


def test_empty_batch():
    probs = _probs()
    empty = torch.zeros(0, dtype=torch.int64)
    s, v = aotinfer.sampling_from_probs(probs, empty, return_valid=True)
    assert s.shape == (0,) and s.dtype == torch.int64 and v.shape == (0,)
    assert aotinfer.sampling_from_logits(torch.randn(0, 10)).shape == (0,)
    draft, target = torch.rand(0, 3, 10), torch.rand(0, 4, 10)
    for kw in (dict(seed=1, offset=0), {}):  # explicit, and the default generator
        out, accepted, emitted = aotinfer.chain_speculative_sampling(
            draft, torch.zeros(0, 3, dtype=torch.int64), target, **kw
        )
        assert out.shape == (0, 4) and out.dtype == torch.int32
        assert accepted.shape == emitted.shape == (0,)


def test_public_functions_match_the_reference_calls():
    """Wiring: each public function draws what the reference gives for its filter."""
    probs, logits = _probs(5, 64, seed=3), torch.randn(5, 64)
    idx = torch.tensor([4, 0, 0, 2, 1, 3, 3])
    k, p = torch.tensor([1, 4, 8, 64, 2]), torch.tensor([0.2, 0.9, 0.5, 1.0, 0.7])
    kw = dict(seed=123, offset=8)

    def tokens(*args, **kwargs):
        return ref.sample_from_probs(probs, idx, *args, **kwargs, **kw)[0].to(torch.int64)

    assert torch.equal(aotinfer.sampling_from_probs(probs, idx, **kw), tokens(0))
    assert torch.equal(aotinfer.top_k_sampling_from_probs(probs, k, idx, **kw), tokens(1, k))
    assert torch.equal(aotinfer.top_p_sampling_from_probs(probs, p, idx, **kw), tokens(2, 0, p))
    assert torch.equal(
        aotinfer.min_p_sampling_from_probs(probs, 0.3, idx, **kw), tokens(3, 0, 1.0, 0.3)
    )
    assert torch.equal(
        aotinfer.top_k_top_p_sampling_from_probs(probs, k, p, idx, **kw), tokens(4, k, p)
    )
    assert torch.equal(
        aotinfer.top_k_top_p_sampling_from_probs(probs, k, p, idx, "joint", **kw), tokens(5, k, p)
    )
    want = ref.sample_from_logits(logits, idx, **kw)[0]
    assert torch.equal(aotinfer.sampling_from_logits(logits, idx, **kw), want)
    masked = ref.softmax(ref.top_k_mask_logits(logits, k))
    want = ref.sample_from_probs(masked, idx, 2, 0, p, **kw)[0]
    assert torch.equal(aotinfer.top_k_top_p_sampling_from_logits(logits, k, p, idx, **kw), want)
    want = ref.sample_from_probs(ref.softmax(logits), idx, 5, k, p, **kw)[0]
    got = aotinfer.top_k_top_p_sampling_from_logits(logits, k, p, idx, "joint", **kw)
    assert torch.equal(got, want)


def test_float16_and_bfloat16_probs_are_read_as_float32():
    probs = _probs(3, 40)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        a = aotinfer.top_k_sampling_from_probs(probs.to(dtype), 4, seed=5, offset=0)
        b = aotinfer.top_k_sampling_from_probs(probs.to(dtype).float(), 4, seed=5, offset=0)
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------
# NaN / infinity contract


def test_degenerate_rows_give_zero_and_invalid_without_touching_other_rows():
    probs = _probs(6, 30, seed=4)
    clean = probs.clone()
    probs[1] = NAN
    probs[3] = 0.0
    probs[4] = -1.0
    probs[5] = INF
    for name, fn in SAMPLERS.items():
        s, v = fn(probs, seed=9, offset=4, return_valid=True)
        assert v.tolist() == [True, False, True, False, False, False], name
        assert s[[1, 3, 4, 5]].tolist() == [0, 0, 0, 0], name
        s_clean = fn(clean, seed=9, offset=4)
        assert s[[0, 2]].tolist() == s_clean[[0, 2]].tolist(), name


def test_nan_negative_and_infinite_entries_are_never_drawn():
    probs = _probs(2, 40, seed=6)
    bad = [3, 11, 17, 29]
    probs[:, 3] = NAN
    probs[:, 11] = -0.5
    probs[:, 17] = INF
    probs[:, 29] = 1e30 * 0  # zero
    idx = many(2, 3000)
    for name, fn in SAMPLERS.items():
        s = fn(probs, indices=idx, seed=2, offset=0)
        assert not torch.isin(s, torch.tensor(bad)).any(), name


def test_nan_and_minus_inf_logits_are_never_drawn():
    logits = torch.randn(2, 40)
    logits[:, 5] = NAN
    logits[:, 6] = -INF
    logits[1] = -INF
    logits[1, 9] = 0.0  # all -inf but one
    s = aotinfer.sampling_from_logits(logits, many(2, 2000), seed=3, offset=0)
    assert not torch.isin(s, torch.tensor([5, 6])).any()
    assert (s[2000:] == 9).all()
    for order in ("top_k_first", "joint"):
        s = aotinfer.top_k_top_p_sampling_from_logits(
            logits, 40, 0.99, many(2, 500), filter_apply_order=order, seed=3, offset=0
        )
        assert not torch.isin(s, torch.tensor([5, 6])).any(), order
        assert (s[500:] == 9).all(), order


def test_logit_rows_without_a_candidate_give_token_zero():
    logits = torch.full((3, 20), -INF)
    logits[1] = NAN
    logits[2, 4] = 1.0
    assert aotinfer.sampling_from_logits(logits, seed=1, offset=0).tolist() == [0, 0, 4]
    tokens, valid = ref.sample_from_logits(logits, seed=1, offset=0)
    assert valid.tolist() == [False, False, True]


def test_out_of_range_indices_give_token_zero_and_invalid():
    probs = _probs(3, 20)
    s, v = aotinfer.sampling_from_probs(
        probs, torch.tensor([0, 3, -1, 2]), seed=0, offset=0, return_valid=True
    )
    assert v.tolist() == [True, False, False, True]
    assert s[1] == 0 and s[2] == 0


def test_check_nan():
    probs = _probs()
    probs[2, 7] = NAN
    with pytest.raises(ValueError, match=r"^Input probs contains NaN\.$"):
        aotinfer.top_p_sampling_from_probs(probs, 0.9, check_nan=True)
    with pytest.raises(ValueError, match=r"^Input probs contains NaN\.$"):
        aotinfer.sampling_from_probs(probs, check_nan=True)
    logits = torch.randn(3, 10)
    logits[0, 0] = NAN
    with pytest.raises(ValueError, match=r"^Input logits contains NaN\.$"):
        aotinfer.sampling_from_logits(logits, check_nan=True)
    with pytest.raises(ValueError, match=r"^Input logits contains NaN\.$"):
        aotinfer.top_k_top_p_sampling_from_logits(logits, 3, 0.5, check_nan=True)
    assert aotinfer.sampling_from_probs(_probs(), check_nan=True).shape == (4,)


def test_one_hot_rows_and_top_k_one_always_give_the_argmax():
    probs = _probs(3, 50, seed=8)
    probs[1] = 0.0
    probs[1, 42] = 1.0
    argmax = probs.argmax(dim=-1)
    idx = many(3, 200)
    for s in (
        aotinfer.top_k_sampling_from_probs(probs, 1, idx, seed=4, offset=0),
        aotinfer.min_p_sampling_from_probs(probs, 1.0, idx, seed=4, offset=0),
        aotinfer.top_k_top_p_sampling_from_probs(probs, 1, 0.9, idx, seed=4, offset=0),
    ):
        assert torch.equal(s.long(), argmax[idx])


# ----------------------------------------------------------------------------------------
# Statistics of the samplers (chi-square against the exact filtered distribution)


STAT_CASES = [
    ("none", {}),
    ("top_k", {"k": 7}),
    ("top_p", {"top_p": 0.6}),
    ("min_p", {"min_p": 0.15}),
    ("top_k_first", {"k": 12, "top_p": 0.7}),
    ("joint", {"k": 12, "top_p": 0.7}),
]


@pytest.mark.parametrize("mode,params", STAT_CASES, ids=[c[0] for c in STAT_CASES])
def test_probs_sampler_frequencies_match_the_filtered_distribution(mode, params):
    rows, vocab, n = 3, 40, 8000
    probs = _probs(rows, vocab, seed=11)
    probs[2] = torch.linspace(1, 2, vocab) / torch.linspace(1, 2, vocab).sum()  # flat-ish
    mode_id = 0 if mode == "none" else MODES[mode]
    tokens, valid = ref.sample_from_probs(
        probs,
        many(rows, n),
        mode_id,
        params.get("k", 0),
        params.get("top_p", 1.0),
        params.get("min_p", 0.0),
        seed=2024,
        offset=0,
    )
    assert valid.all()
    for r in range(rows):
        kept = brute_kept(
            probs[r], mode, params.get("k", 0), params.get("top_p", 1.0), params.get("min_p", 0.0)
        )
        assert_chi_square(tokens[r * n : (r + 1) * n], expected_distribution(probs[r], kept), n)


def test_gumbel_sampler_frequencies_match_softmax():
    rows, vocab, n = 2, 30, 10000
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(rows, vocab, generator=g) * 1.5
    tokens = aotinfer.sampling_from_logits(logits, many(rows, n), seed=77, offset=12)
    expected = torch.softmax(logits.double(), dim=-1)
    for r in range(rows):
        assert_chi_square(tokens[r * n : (r + 1) * n], expected[r], n)


@pytest.mark.parametrize("order", ["top_k_first", "joint"])
def test_logits_top_k_top_p_frequencies(order):
    vocab, n = 30, 10000
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(9)) * 1.5
    tokens = aotinfer.top_k_top_p_sampling_from_logits(
        logits, 10, 0.8, many(1, n), filter_apply_order=order, seed=5, offset=0
    )
    probs = torch.softmax(logits.double(), dim=-1)[0]
    kept = brute_kept(probs, order, 10, 0.8)
    assert_chi_square(tokens, expected_distribution(probs, kept), n)


def test_draws_sharing_a_row_are_independent():
    probs = torch.full((1, 8), 1 / 8)
    s = aotinfer.sampling_from_probs(probs, torch.zeros(4000, dtype=torch.int64), seed=1, offset=0)
    assert_chi_square(s, torch.full((8,), 1 / 8, dtype=torch.float64), 4000)
    # consecutive draws are not correlated (pairs uniform over 64 cells)
    pairs = s[0::2] * 8 + s[1::2]
    assert_chi_square(pairs, torch.full((64,), 1 / 64, dtype=torch.float64), 2000)


# ----------------------------------------------------------------------------------------
# Renormalisation and masking


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_top_k_renorm_probs(dtype):
    probs = _probs(5, 64, seed=12).to(dtype)
    k = torch.tensor([1, 3, 10, 64, 0])
    out = aotinfer.top_k_renorm_probs(probs, k)
    assert out.dtype == dtype and out.shape == probs.shape
    kept = kept_sets(ref.kept_mask(probs, 1, k))
    for r in range(5):
        want = set(brute_kept(probs[r].float(), "top_k", int(k[r])))
        assert kept[r] == want
        assert set(torch.nonzero(out[r]).flatten().tolist()) == want
        assert abs(float(out[r].double().sum()) - 1) < (1e-5 if dtype == torch.float32 else 2e-2)
        mass = sum(float(probs[r, i].float()) for i in want)
        for i in list(want)[:5]:
            assert float(out[r, i]) == pytest.approx(float(probs[r, i].float()) / mass, rel=1e-2)


def test_top_p_renorm_probs_is_float32_and_sums_to_one():
    probs = _probs(4, 64, seed=13).to(torch.bfloat16)
    out = aotinfer.top_p_renorm_probs(probs, torch.tensor([0.1, 0.5, 0.9, 1.0]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.sum(-1), torch.ones(4), rtol=0, atol=1e-6)
    for r, p in enumerate([0.1, 0.5, 0.9, 1.0]):
        want = brute_kept(probs[r].float(), "top_p", top_p=p)
        assert set(torch.nonzero(out[r]).flatten().tolist()) == want
    assert aotinfer.sampling.top_p_renorm_prob is aotinfer.top_p_renorm_probs
    assert aotinfer.sampling.top_k_renorm_prob is aotinfer.top_k_renorm_probs


def test_renorm_of_degenerate_rows_is_zero():
    probs = _probs(3, 16)
    probs[0] = NAN
    probs[1] = 0.0
    probs[2, 4] = NAN
    for out in (aotinfer.top_k_renorm_probs(probs, 4), aotinfer.top_p_renorm_probs(probs, 0.5)):
        assert (out[:2] == 0).all()
        assert out[2, 4] == 0 and not out.isnan().any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_top_k_mask_logits_keeps_exactly_k_distinct_values(dtype):
    logits = torch.randperm(100).reshape(2, 50).to(dtype)  # distinct, exact in bfloat16
    k = torch.tensor([1, 17])
    out = aotinfer.top_k_mask_logits(logits, k)
    assert out.dtype == dtype
    assert torch.isfinite(out).sum(-1).tolist() == [1, 17]
    for r in range(2):
        top = torch.topk(logits[r].float(), int(k[r])).indices
        assert torch.equal(out[r, top], logits[r, top])
    out = aotinfer.top_k_mask_logits(logits, 5)
    assert torch.isfinite(out).sum(-1).tolist() == [5, 5]


def test_top_k_mask_logits_ties_nan_and_no_filter():
    logits = torch.tensor([[1.0, 3.0, 3.0, NAN, 2.0, -INF]])
    assert aotinfer.top_k_mask_logits(logits, 1).tolist() == [[-INF, 3.0, 3.0, -INF, -INF, -INF]]
    assert aotinfer.top_k_mask_logits(logits, 3).tolist() == [[-INF, 3.0, 3.0, -INF, 2.0, -INF]]
    # k >= vocab: no filter, but NaN is never kept.
    assert aotinfer.top_k_mask_logits(logits, 6).tolist() == [[1.0, 3.0, 3.0, -INF, 2.0, -INF]]


def test_mask_then_softmax_equals_renorm_of_softmax():
    logits = torch.randn(4, 100) * 2
    k = torch.tensor([1, 5, 50, 100])
    a = aotinfer.softmax(aotinfer.top_k_mask_logits(logits, k))
    b = aotinfer.top_k_renorm_probs(aotinfer.softmax(logits), k)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------------
# top_k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_top_k_against_torch_topk(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.randperm(200, generator=g) for _ in range(3)]).to(dtype)  # exact
    values, indices = aotinfer.top_k(x, 10, sorted=True)
    tv, ti = torch.topk(x.float(), 10, sorted=True)
    assert values.dtype == dtype and indices.dtype == torch.int64
    assert torch.equal(values.float(), tv) and torch.equal(indices, ti)
    v2, i2 = aotinfer.top_k(x, 10)
    assert torch.equal(i2, ti.sort(dim=-1).values)  # ascending index order
    assert torch.equal(v2, x.gather(1, i2))


def test_top_k_ties_lowest_index_first_and_nan_last():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0, 3.0, NAN, -INF]])
    v, i = aotinfer.top_k(x, 2)
    assert i.tolist() == [[1, 3]] and v.tolist() == [[3.0, 3.0]]
    v, i = aotinfer.top_k(x, 7, sorted=True)
    assert i.tolist() == [[1, 3, 4, 2, 0, 6, 5]]
    assert ref_topk.top_k(x, 7, sorted=True)[1].tolist() == i.tolist()


# ----------------------------------------------------------------------------------------
# Chain speculative sampling


def _chain_inputs(batch, n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    draft = torch.softmax(torch.randn(batch, n, vocab, generator=g), -1)
    target = torch.softmax(torch.randn(batch, n + 1, vocab, generator=g), -1)
    ids = torch.multinomial(draft.reshape(-1, vocab), 1, generator=g).reshape(batch, n)
    return draft, ids, target


def test_chain_speculative_shapes_and_invariants():
    draft, ids, target = _chain_inputs(64, 4, 20, seed=1)
    out, acc, emi = aotinfer.chain_speculative_sampling(draft, ids, target, seed=3, offset=0)
    assert out.shape == (64, 5) and out.dtype == torch.int32
    assert acc.dtype == emi.dtype == torch.int32 and acc.shape == emi.shape == (64,)
    assert torch.equal(emi + 1, (out != -1).sum(1).int())
    assert (acc >= emi).all() and (emi <= 4).all()
    for b in range(64):
        e = int(emi[b])
        assert torch.equal(out[b, :e], ids[b, :e].int())
        assert 0 <= out[b, e] < 20
        assert (out[b, e + 1 :] == -1).all()


def test_chain_speculative_accumulates_into_given_counters():
    draft, ids, target = _chain_inputs(8, 3, 10, seed=2)
    acc0, emi0 = torch.full((8,), 5, dtype=torch.int32), torch.full((8,), 7, dtype=torch.int32)
    acc, emi = acc0.clone(), emi0.clone()
    _, a, e = aotinfer.chain_speculative_sampling(draft, ids, target, acc, emi, seed=1, offset=0)
    assert a is acc and e is emi
    _, a1, e1 = aotinfer.chain_speculative_sampling(draft, ids, target, seed=1, offset=0)
    assert torch.equal(acc, acc0 + a1) and torch.equal(emi, emi0 + e1)


def test_chain_speculative_identical_draft_and_target_accepts_everything():
    draft, ids, _ = _chain_inputs(16, 3, 12, seed=4)
    target = torch.cat([draft, draft[:, :1]], dim=1)
    out, acc, emi = aotinfer.chain_speculative_sampling(draft, ids, target, seed=2, offset=0)
    assert (emi == 3).all() and (acc == 3).all()
    assert torch.equal(out[:, :3], ids.int())


def test_chain_speculative_out_of_range_ids_are_rejected():
    draft, ids, target = _chain_inputs(4, 2, 10, seed=5)
    ids[:, 0] = torch.tensor([-1, 10, 99, 3])
    target[:, 0] = 0.0
    target[:, 0, 6] = 1.0  # the residual is one-hot on token 6
    out, acc, emi = aotinfer.chain_speculative_sampling(draft, ids, target, seed=2, offset=0)
    assert emi.tolist() == [0, 0, 0, 0]
    assert out[:, 0].tolist() == [6, 6, 6, 6]


def test_chain_speculative_first_token_follows_the_target():
    # Speculative sampling's guarantee: the emitted token at position 0 ~ target[0].
    vocab, n_req = 12, 20000
    draft, _, target = _chain_inputs(1, 1, vocab, seed=6)
    d = draft.expand(n_req, 1, vocab).contiguous()
    t = target.expand(n_req, 2, vocab).contiguous()
    g = torch.Generator().manual_seed(8)
    ids = torch.multinomial(draft[0, 0], n_req, replacement=True, generator=g).reshape(n_req, 1)
    out, _, _ = aotinfer.chain_speculative_sampling(d, ids, t, seed=11, offset=0)
    assert_chi_square(out[:, 0], target[0, 0].double(), n_req)


def test_chain_speculative_matches_the_reference():
    draft, ids, target = _chain_inputs(32, 5, 50, seed=7)
    seed = torch.arange(32, dtype=torch.int64) * 7919
    offset = torch.tensor([16], dtype=torch.int64)
    out, acc, emi = aotinfer.chain_speculative_sampling(
        draft, ids, target, seed=seed, offset=offset
    )
    r_out, r_acc, r_emi = ref.chain_speculative_sampling(
        draft, ids, target, seed=seed, offset=offset
    )
    assert torch.equal(out, r_out) and torch.equal(acc, r_acc) and torch.equal(emi, r_emi)


def test_chain_speculative_without_drafts_draws_the_bonus_token():
    target = torch.zeros(3, 1, 9)
    target[:, 0, 4] = 1.0
    out, acc, emi = aotinfer.chain_speculative_sampling(
        torch.zeros(3, 0, 9), torch.zeros(3, 0, dtype=torch.int64), target, seed=0, offset=0
    )
    assert out.tolist() == [[4], [4], [4]] and emi.tolist() == [0, 0, 0]
