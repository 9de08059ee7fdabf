"""The sampling family on CUDA against aotinfer.reference (run on the GPU too).

- Tokens: the kernels and the reference draw from the same Philox numbers, so for the same
  seed and offset they give the same tokens; a tiny fraction may differ (allowed: 0.1% of
  draws) where two Gumbel scores tie to within the last bit of ``log``, or where a float64
  threshold of the reference and the kernels' fixed-point one fall on either side of a
  probability.
- Frequencies: many draws from few rows (``indices``) against the exact filtered
  distribution, by a chi-square test whose bound comes from the sample count; a biased
  sampler fails it, and a token outside the kept set fails it outright.
- Renormalisation, masking and top-k selection against the reference; reproducibility;
  per-row parameters and seeds; the edge cases of issue 3; CUDA-graph replay with new
  values written into the captured tensors.

tests/gpu/conftest.py fills every ``torch.empty`` with NaN / -1 first, so an output element
a kernel forgets to write shows up.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

import aotinfer
from aotinfer.reference import sampling as ref
from aotinfer.reference import topk as ref_topk

DEV = "cuda"
NAN, INF = float("nan"), float("inf")
MODES = {"probs": 0, "top_k": 1, "top_p": 2, "min_p": 3, "top_k_first": 4, "joint": 5}
LOGIT_SAMPLERS = ("logits", "logits_top_k_first", "logits_joint")
SAMPLERS = (*MODES, *LOGIT_SAMPLERS)

# (vocab, batch): every vocabulary of issue 3 with batches 1, 99 and 989 where the
# reference stays cheap.
SHAPES = [
    (111, 1),
    (111, 99),
    (111, 989),
    (32000, 1),
    (32000, 99),
    (32000, 989),
    (128256, 1),
    (128256, 99),
    (151936, 1),
    (151936, 16),
    (256000, 1),
    (256000, 8),
]


def gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def make_logits(rows, vocab, seed, scale=3.0, dtype=torch.float32):
    return (torch.randn(rows, vocab, device=DEV, generator=gen(seed)) * scale).to(dtype)


def make_probs(rows, vocab, seed, scale=3.0):
    return torch.softmax(make_logits(rows, vocab, seed, scale), dim=-1)


def per_row_params(rows, vocab, seed):
    """top_k (int32, with some 'no filter' values), top_p and min_p per row."""
    g = gen(seed)
    k = torch.randint(1, min(vocab, 1000) + 1, (rows,), device=DEV, generator=g, dtype=torch.int32)
    if rows > 3:
        k[0], k[1], k[2] = 0, vocab, vocab + 7  # no filter
    p = torch.rand(rows, device=DEV, generator=g) * 0.95 + 0.05
    if rows > 4:
        p[3] = 1.0
    m = torch.rand(rows, device=DEV, generator=g) * 0.5 + 0.01
    return k, p, m


def draw(name, probs, logits, k, p, m, idx, seed, offset):
    """(tokens, valid or None) from the public function for sampler `name`."""
    kw = dict(indices=idx, seed=seed, offset=offset)
    if name == "probs":
        return aotinfer.sampling_from_probs(probs, return_valid=True, **kw)
    if name == "top_k":
        return aotinfer.top_k_sampling_from_probs(probs, k, return_valid=True, **kw)
    if name == "top_p":
        return aotinfer.top_p_sampling_from_probs(probs, p, return_valid=True, **kw)
    if name == "min_p":
        return aotinfer.min_p_sampling_from_probs(probs, m, return_valid=True, **kw)
    if name in ("top_k_first", "joint"):
        return aotinfer.top_k_top_p_sampling_from_probs(
            probs, k, p, filter_apply_order=name, return_valid=True, **kw
        )
    if name == "logits":
        return aotinfer.sampling_from_logits(logits, **kw), None
    order = name[len("logits_") :]
    return aotinfer.top_k_top_p_sampling_from_logits(
        logits, k, p, filter_apply_order=order, **kw
    ), None


def expect(name, probs, logits, k, p, m, idx, seed, offset):
    """The reference's (tokens, valid) for the same call."""
    kw = dict(seed=seed, offset=offset)
    if name in MODES:
        return ref.sample_from_probs(probs, idx, MODES[name], k, p, m, **kw)
    if name == "logits":
        return ref.sample_from_logits(logits, idx, **kw)
    if name == "logits_top_k_first":
        masked = ref.softmax(ref.top_k_mask_logits(logits, k))
        return ref.sample_from_probs(masked, idx, MODES["top_p"], 0, p, **kw)
    finite = torch.nan_to_num(logits.float(), nan=-INF, posinf=INF, neginf=-INF)
    return ref.sample_from_probs(ref.softmax(finite), idx, MODES["joint"], k, p, **kw)


def assert_same_tokens(got, want, what="", lowest=0):
    """At most 0.1% of `got` differ from `want`; nothing below `lowest` (the poison, -1,
    marks an unwritten sample)."""
    got, want = got.long().cpu(), want.long().cpu()
    assert got.shape == want.shape
    assert (got >= lowest).all(), f"{what}: unwritten samples"
    mismatched = int((got != want).sum())
    allowed = int(1e-3 * got.numel())
    assert mismatched <= allowed, f"{what}: {mismatched} of {got.numel()} tokens differ"


def assert_samplers_match_reference(names, probs, k, p, m, idx, seed, offset):
    """The tokens each sampler of `names` draws from `probs` equal the reference's."""
    for name in names:
        got, _ = draw(name, probs, None, k, p, m, idx, seed, offset)
        want, _ = expect(name, probs, None, k, p, m, idx, seed, offset)
        assert_same_tokens(got, want, name)


def assert_chi_square(tokens, expected, n, what=""):
    """Counts of `tokens` against n * expected (float64, sums to 1). Cells expecting fewer
    than 5 draws are pooled. The bound df + 7 sqrt(2 df) + 10 lies beyond the 1e-6 quantile
    of chi-square(df) for every df; a sampler a few percent off on a common token, or one
    that draws outside the kept set, exceeds it at these counts."""
    counts = torch.bincount(tokens.long().flatten(), minlength=expected.numel()).double()
    expected = expected.double().to(counts.device)
    outside = int(counts[expected == 0].sum())
    assert outside == 0, f"{what}: {outside} draws outside the kept set"
    e = expected * n
    big = e >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([e[big], e[~big].sum().reshape(1)])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    df = max(int(keep.sum()) - 1, 1)
    bound = df + 7 * math.sqrt(2 * df) + 10
    assert stat < bound, f"{what}: chi-square {stat:.1f} >= {bound:.1f} (df {df})"


def filtered_distribution(probs_row, mode, k=0, p=1.0, m=0.0):
    kept = ref.kept_mask(probs_row.unsqueeze(0), mode, k, p, m)[0]
    w = torch.where(kept, probs_row.double(), 0.0)
    return w / w.sum()


def many(rows, n, dtype=torch.int64):
    return torch.arange(rows, device=DEV, dtype=dtype).repeat_interleave(n)


@pytest.fixture(params=["cluster", "rowwise", "rowwise-no-gather"])
def sampling_kernel(request, monkeypatch):
    """Both kernel families: "cluster" pins the cluster kernels (slice_kernels.cuh; on
    sm_90+, for every row length and batch), "rowwise" the one-CTA-per-row kernels, which
    gather a search's crossing bin into shared memory (gather.cuh), and "rowwise-no-gather"
    those kernels with gathering off (AOTINFER_SAMPLING_GATHER=off: every search level and
    the draw read the row, as they do where the bin does not fit). Left alone ("auto"), the
    provider takes the clusters for small batches of rows of 8192+ elements on sm_90+ and
    the rowwise kernels otherwise."""
    family, _, gather = request.param.partition("-")
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", family)
    monkeypatch.setenv("AOTINFER_SAMPLING_GATHER", "off" if gather else "on")
    return request.param


@pytest.fixture(params=["auto", "rowwise", "cluster"])
def any_sampling_kernel(request, monkeypatch):
    """As sampling_kernel, plus the provider's own choice."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", request.param)
    return request.param


# ----------------------------------------------------------------------------------------
# Tokens equal the reference's


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("vocab,batch", SHAPES, ids=[f"V{v}-B{b}" for v, b in SHAPES])
def test_tokens_match_reference(name, vocab, batch, any_sampling_kernel):
    case = SHAPES.index((vocab, batch))
    with_indices = case % 2 == 1
    rows = max(1, batch // 3) if with_indices else batch
    logits = make_logits(rows, vocab, seed=case)
    probs = torch.softmax(logits, dim=-1)
    k, p, m = per_row_params(rows, vocab, seed=100 + case)
    if case % 3 == 0:  # scalars instead of per-row tensors
        k, p, m = int(k[-1]), float(p[-1]), float(m[-1])
    idx = None
    if with_indices:
        dtype = torch.int32 if case % 4 == 1 else torch.int64
        idx = torch.randint(0, rows, (batch,), device=DEV, generator=gen(case), dtype=dtype)
    if case % 2 == 0:
        seed = torch.randint(0, 2**62, (batch,), device=DEV, generator=gen(7 + case))
        offset = torch.tensor([4 * case], device=DEV)
    else:
        seed, offset = 1000 + case, 8 * case
    tokens, valid = draw(name, probs, logits, k, p, m, idx, seed, offset)
    assert tokens.shape == (batch,) and tokens.device.type == DEV
    assert tokens.dtype == (idx.dtype if idx is not None else torch.int32)
    want, want_valid = expect(name, probs, logits, k, p, m, idx, seed, offset)
    assert_same_tokens(tokens, want, name)
    if valid is not None:
        assert valid.all() and want_valid.all()


@pytest.mark.parametrize("name", ["probs", "top_k", "top_p", "min_p", "joint"])
def test_tokens_match_reference_on_rows_of_more_than_3072_draw_segments(name):
    """Rows past 3072 segments of 128 elements (393216): each of the draw's segments then
    spans several warp loads (inverse_cdf.cuh, per_segment > 1), and the chosen one is
    rescanned in several steps. The cluster kernels never see such rows (their slices do
    not fit in shared memory), so this is the one-CTA-per-row kernel."""
    rows, vocab = 4, 600_001
    probs = make_probs(rows, vocab, seed=31)
    k, p, m = per_row_params(rows, vocab, seed=32)
    idx = many(rows, 64)
    tokens, valid = draw(name, probs, None, k, p, m, idx, 5, 3)
    want, want_valid = expect(name, probs, None, k, p, m, idx, 5, 3)
    assert_same_tokens(tokens, want, name)
    assert valid.all() and want_valid.all()


@pytest.mark.parametrize("gather", ["on", "off"])
@pytest.mark.parametrize("threads", ["512", "1024"])
def test_both_row_kernel_sizes_match_the_reference(threads, gather, monkeypatch):
    """The one-CTA-per-row kernels at 1024 threads and at 512 (two CTAs per SM, which the
    launcher takes from batch >= 2 x SMs on, with half the shared memory for gathering),
    pinned on a small batch, gathering on and off: the reference's tokens for every filter,
    and its renorm and mask outputs."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    monkeypatch.setenv("AOTINFER_SAMPLING_GATHER", gather)
    rows, vocab = 37, 32003
    probs = make_probs(rows, vocab, seed=41)
    k, p, m = per_row_params(rows, vocab, seed=42)
    assert_samplers_match_reference(MODES, probs, k, p, m, many(rows, 3), 7, 1)
    torch.testing.assert_close(
        aotinfer.top_p_renorm_probs(probs, p),
        ref.renorm_probs(probs, MODES["top_p"], 0, p),
        rtol=1e-5,
        atol=1e-9,
    )
    torch.testing.assert_close(
        aotinfer.top_k_renorm_probs(probs, k),
        ref.renorm_probs(probs, MODES["top_k"], k),
        rtol=1e-5,
        atol=1e-9,
    )
    logits = make_logits(rows, vocab, seed=43)
    assert torch.equal(aotinfer.top_k_mask_logits(logits, k), ref.top_k_mask_logits(logits, k))


@pytest.mark.parametrize("threads", ["512", "1024"])
def test_a_gathered_bin_that_overflows_a_warps_slice_falls_back(threads, monkeypatch):
    """Rows whose threshold bin (640 elements in one quarter binade, [0.5, 0.55)) fits the
    gather list (8192 entries at vocab 65536 with 1024 threads; with 512, 2048 and 8192 for
    the top-p sampler; gathered up to 3/4 full) but lies in row segments 0, 32, 64, 96 and
    128 (128 elements each), which the gather pass gives all to warp 0 (segment s goes to
    warp s % warps, 32 or 16 warps): 640 entries for a slice of 256 (1024 threads), 128 or
    512 (512 threads). That warp drops the list and the search reads the row instead
    (gather.cuh). Tokens, renorm and the kept set still equal the reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    rows, vocab = 6, 65536
    g = gen(51)
    probs = torch.full((rows, vocab), 1e-7, device=DEV)
    for segment in (0, 32, 64, 96, 128):
        start = 128 * segment
        probs[:, start : start + 128] = 0.5 + 0.05 * torch.rand(rows, 128, device=DEV, generator=g)
    k = torch.tensor([300, 200, 1, 639, 64, 450], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.5, 0.2, 0.9, 0.01, 0.7, 0.35], device=DEV)
    idx = many(rows, 64)
    assert_samplers_match_reference(("top_k", "top_p"), probs, k, p, 0.1, idx, 9, 2)
    torch.testing.assert_close(
        aotinfer.top_p_renorm_probs(probs, p),
        ref.renorm_probs(probs, MODES["top_p"], 0, p),
        rtol=1e-5,
        atol=1e-9,
    )


@pytest.mark.parametrize("vocab", [32000, 65536])
@pytest.mark.parametrize("threads", ["512", "1024"])
def test_two_search_sampler_with_and_without_its_kept_set_list(threads, vocab, monkeypatch):
    """The two-search sampler (joint and top-k-first) of the one-CTA-per-row kernels may list
    its top-k set after the top-k search (GatherMode::kKeptSet, kept_set_list.cuh: 1024
    entries, slices of 32 per warp; the 1024-thread kernel at vocab 32000) or its top-k
    search's candidates in level 0 (GatherMode::kHeadBound: the 512-thread kernel, and vocab
    65536), and run the top-p search and the draw from that list.
    Rows (small noise, so that in rows 0, 1, 2 and 5 the top-k set outweighs p and joint runs
    its top-p search too; top-k-first always does): 0, 60 large values at random positions
    (listed); 1, the 200 largest in segments 0, 32 and 64, all warp 0's (its slice overflows:
    the list is dropped, the row is read); 2, 300 ties at the top-k threshold (listed: ties are
    kept); 3, k = 600 (more than half the list: not listed); 4, a flat row, whose top-k set is
    lighter than p (joint: no top-p search); 5, NaN and zeros among the large values. Tokens
    equal the reference's either way."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    rows = 6
    g = gen(61)
    probs = 1e-3 * torch.rand(rows, vocab, device=DEV, generator=g) ** 8
    spots = torch.randperm(vocab, device=DEV, generator=g)[:300]
    probs[0, spots[:60]] = 0.5 + torch.rand(60, device=DEV, generator=g)
    segments = [torch.arange(128 * s, 128 * s + 128, device=DEV) for s in (0, 32, 64)]
    crowded = torch.cat(segments)[:200]
    probs[1, crowded] = 1.0 + torch.rand(200, device=DEV, generator=g)
    probs[2, spots] = 2.0
    probs[4] = 0.5 + 0.01 * torch.rand(vocab, device=DEV, generator=g)
    probs[5, spots[:40]] = 3.0 + torch.rand(40, device=DEV, generator=g)
    probs[5, spots[40:45]] = float("nan")
    probs[5, spots[45:50]] = 0.0
    probs = probs / probs.nan_to_num().sum(-1, keepdim=True)
    k = torch.tensor([50, 150, 10, 600, 5, 45], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.6, 0.5, 0.3, 0.95, 0.9, 0.8], device=DEV)
    idx = many(rows, 64)
    assert_samplers_match_reference(("joint", "top_k_first"), probs, k, p, 0.1, idx, 13, 4)


def _ordered_rows(order, rows, vocab, seed, dtype=torch.float32):
    """Logits for the level-0 list (head_bound_list.cuh): rows in random order, sorted
    ascending (the head holds the smallest values: everything after it is listed and the
    list overflows), sorted descending (the head holds the largest values and most of the
    crossing bin), all equal (one bin), and random with NaN / inf in the head."""
    x = make_logits(rows, vocab, seed=seed)
    if order == "ascending":
        x = x.sort(-1).values
    elif order == "descending":
        x = x.sort(-1, descending=True).values
    elif order == "equal":
        x = torch.full_like(x, 0.25)
    elif order == "special-head":
        x[:, 3] = NAN
        x[:, 10:20] = float("inf")
        x[:, 30:40] = -float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("order", ["random", "ascending", "descending", "equal", "special-head"])
@pytest.mark.parametrize("threads", ["512", "1024"])
def test_top_k_mask_and_renorm_with_the_level0_list(order, threads, monkeypatch):
    """Top-k masking and renormalisation of rows beyond L1 (vocab >= 65536) list their
    candidates in level 0 from a bound on the row's head (head_bound_list.cuh), and where the
    list holds the kept set the output is written from it: exact for any row order, the list
    dropped where a slice overflows, no list where k > capacity / 16 (250 in the 512-thread
    kernels: a list of vocab / 32 keys). The k values straddle that limit; each row has its
    own k. Both kernel sizes run the same rows."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    vocab = 128256
    k = torch.tensor([1, 50, 249, 251, 1000, 1002, 1003, 5000], device=DEV, dtype=torch.int32)
    rows = k.numel()
    for dtype in (torch.float32, torch.bfloat16):
        logits = _ordered_rows(order, rows, vocab, seed=len(order) + int(threads), dtype=dtype)
        got = aotinfer.top_k_mask_logits(logits, k)
        assert torch.equal(got, ref.top_k_mask_logits(logits, k)), f"{dtype}"
        got = aotinfer.top_k_mask_logits(logits, 50)
        assert torch.equal(got, ref.top_k_mask_logits(logits, 50)), f"{dtype}"
    probs = torch.softmax(_ordered_rows(order, rows, vocab, seed=3).nan_to_num(0.0, 0.0, 0.0), -1)
    if order == "special-head":
        probs[:, 3] = NAN
        probs[:, 10:20] = float("inf")
    want = ref.renorm_probs(probs, MODES["top_k"], k)
    torch.testing.assert_close(aotinfer.top_k_renorm_probs(probs, k), want, rtol=1e-5, atol=1e-9)
    want = ref.renorm_probs(probs, MODES["top_k"], 50)
    torch.testing.assert_close(aotinfer.top_k_renorm_probs(probs, 50), want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("vocab", [32000, 128256])
@pytest.mark.parametrize("order", ["random", "ascending", "descending", "equal", "special-head"])
@pytest.mark.parametrize("threads", ["512", "1024"])
def test_top_k_samplers_on_ordered_rows(order, threads, vocab, monkeypatch):
    """The samplers with a top-k search (top-k, top-k-first, joint) on the rows of the level-0
    list's test: random, ascending (a list from the head's bound overflows), descending, all
    equal and NaN / inf in the head, with k on both sides of the list limits (a level-0 list
    takes k <= capacity / 16, the kept-set list k <= 512). The one-CTA-per-row kernels, both
    sizes: the 512-thread kernels and vocab 128256 draw from the level-0 list
    (GatherMode::kHeadBound), the 1024-thread kernel at 32000 gathers its bin or kept set;
    tokens equal the reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    k = torch.tensor([1, 50, 249, 251, 600, 1002, 5000, 20], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.9, 0.5, 0.99, 0.2, 0.9, 0.7, 0.95, 0.01], device=DEV)
    rows = k.numel()
    logits = _ordered_rows(order, rows, vocab, seed=len(order) + int(threads))
    probs = torch.softmax(4 * logits.nan_to_num(0.0, 0.0, 0.0), -1)
    if order == "special-head":
        probs[:, 3] = NAN
        probs[:, 10:20] = float("inf")
    samplers = ("top_k", "top_k_first", "joint")
    assert_samplers_match_reference(samplers, probs, k, p, 0.1, many(rows, 16), 21, 6)


def crowd_rows(probs, spots, g):
    """Rows 2-4 of the cluster list tests (`spots`: 340 random places): 2, 40 ties at the top at
    random places and 300 ties below them in the first slice, over the caller's small rest
    (its region of rank 0's list overflows); 3, all equal; 4, only 30 positive entries, with
    NaN and inf among the rest."""
    probs[2, spots[:40]] = 0.02
    probs[2, 100:400] = 0.01
    probs[3] = 1.0
    probs[4] = 0.0
    probs[4, spots[:30]] = torch.rand(30, device=DEV, generator=g) + 0.1
    probs[4, spots[30:35]] = NAN
    probs[4, spots[35:40]] = float("inf")


@pytest.fixture(params=["8", "16", "4"])
def cluster_ctas(request, monkeypatch):
    """The cluster kernels in clusters of 8, and, wherever they fit, of 16 and of 4 (the
    provider's own rule takes 16 for up to 4 rows of a large vocabulary and 4 from 16 rows of
    at most 65536 or 81920 by kind: sample_launch.cu's wanted_slice_ctas)."""
    monkeypatch.setenv("AOTINFER_SAMPLING_CLUSTER_CTAS", request.param)
    return request.param


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_cluster_top_k_sampler_on_crowded_and_tied_rows(vocab, cluster_ctas, monkeypatch):
    """The cluster top-k sampler (slice_kernels.cuh; each CTA lists its slice's top k into rank
    0, which draws from that list: cluster_local_top_k.cuh) on rows that test such a list: 0,
    random; 1, the 60 largest all in the first CTA's slice; 2, 40 ties at the top at random
    positions and 300 ties below them in the first slice (its region of 128 entries overflows:
    back to the cluster-wide search); 3, all equal; 4, only 30 positive entries (fewer than k:
    keep them all), with NaN and inf among the rest; 5, k = 65 and 6, k = 64 (beyond and at the
    list's limit of half a region); 7, k = 1. Every slice (2000 to 32064 keys here) takes its
    bound from level 0 scanned by one warp (level0_count_bound.cuh) where that level settles it
    (rows 0, 1's first slice, 4's slices: fewer than k keys) and from the search where it does
    not (the crowded bins of rows 1-3). Tokens equal the reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "cluster")
    rows = 8
    g = gen(71)
    probs = make_probs(rows, vocab, seed=72)
    probs[1:3] = 1e-6 * torch.rand(2, vocab, device=DEV, generator=g)
    probs[1, :60] = 0.01 + 0.01 * torch.rand(60, device=DEV, generator=g)
    spots = torch.randperm(vocab, device=DEV, generator=g)[:340]
    crowd_rows(probs, spots, g)
    probs = probs / probs.nan_to_num(0.0, 0.0, 0.0).sum(-1, keepdim=True)
    k = torch.tensor([50, 50, 50, 50, 50, 65, 64, 1], device=DEV, dtype=torch.int32)
    assert_samplers_match_reference(("top_k",), probs, k, 0.9, 0.1, many(rows, 16), 23, 8)


def two_search_rows(vocab):
    """Rows, k and p of the cluster two-search tests below. Rows: 0, random (joint keeps the
    top-k set); 1, ten entries hold 0.95 of the mass (the top-p search runs within the top k);
    2, 40 ties at the top and 300 ties below them in the first slice (a region overflows: the
    cluster-wide search); 3, all equal; 4, only 30 positive entries, NaN and inf among the rest;
    5, p = 1 (no top-p filter); 6, one entry of 1/2 and 2^14 distinct entries near 2^-15 that
    sum to 1/2 exactly, with k = 1 and p = 1/2, so that the top-k set's mass equals joint's goal
    exactly (the bounds cannot decide: rank 0 sums the row's mass exactly, exact_row_mass);
    7, k = 64 with five entries at the top."""
    rows = 8
    g = gen(73)
    probs = make_probs(rows, vocab, seed=74)
    head = torch.randperm(vocab, device=DEV, generator=g)[:10]
    probs[1, head] = 0.95 / 10 * probs[1].sum() / 0.05
    spots = torch.randperm(vocab, device=DEV, generator=g)[:340]
    probs[2] = 1e-6 * torch.rand(vocab, device=DEV, generator=g)
    crowd_rows(probs, spots, g)
    probs[7, spots[:5]] = 0.2 * probs[7].sum()
    probs = probs / probs.nan_to_num(0.0, 0.0, 0.0).sum(-1, keepdim=True)
    # Row 6: 1/2, then 2^-15 +- j 2^-38 for j = 1..8192 (distinct, exact in float32, summing
    # to 1/2 exactly), shuffled over the last 16384 places: no CTA's list overflows.
    j = torch.arange(1, 8193, device=DEV, dtype=torch.float64) * 2.0**-38
    tail = torch.cat([2.0**-15 + j, 2.0**-15 - j]).float()
    probs[6] = 0.0
    probs[6, 0] = 0.5
    probs[6, vocab - 16384 :] = tail[torch.randperm(16384, device=DEV, generator=g)]
    k = torch.tensor([50, 50, 50, 50, 50, 40, 1, 64], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.9, 0.9, 0.5, 0.9, 0.8, 1.0, 0.5, 0.9], device=DEV)
    return probs, k, p


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_cluster_two_search_samplers_on_crowded_tied_and_balanced_rows(
    vocab, cluster_ctas, monkeypatch
):
    """Top-k then top-p and joint top-k / top-p in the cluster kernels (rank 0 decides the kept
    set from the CTAs' lists of their own top k, and joint's goal from bounds on the row's total
    mass: cluster_local_top_k.cuh's two_search_list_filter), on two_search_rows. In clusters of
    4 and 8 joint settles row 0 by count and the draw's scan (the top-k set kept whole) and row
    1 within the top-k set by one warp (joint_top_p_in_set_draw), and leaves row 6 to the
    searches (its set's mass lies between the goals of the row's mass bounds). 128 outputs a
    call: the kernels' instances at two CTAs a SM. Tokens equal the reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "cluster")
    probs, k, p = two_search_rows(vocab)
    samplers = ("top_k_first", "joint")
    assert_samplers_match_reference(samplers, probs, k, p, 0.1, many(8, 16), 25, 9)


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_cluster_two_search_samplers_at_one_cta_a_sm(vocab, cluster_ctas, monkeypatch):
    """The same rows drawn one to four outputs a call: sample_launch.cu launches the two-search
    list kernels' instances at one CTA a SM (their own SASS, up to 128 registers) for up to
    kOneCtaMaxRows = 4 outputs, in clusters of 4, 8 and 16 alike. Tokens equal the
    reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "cluster")
    probs, k, p = two_search_rows(vocab)
    samplers = ("top_k_first", "joint")
    for idx in ([0, 1, 2, 3], [4, 5, 6, 7], [6], [1, 1]):
        rows = torch.tensor(idx, device=DEV)
        assert_samplers_match_reference(samplers, probs, k, p, 0.1, rows, 25, 9)


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_cluster_two_search_samplers_on_top_k_sets_many_binades_deep(
    vocab, cluster_ctas, monkeypatch
):
    """Top-k then top-p and joint in the cluster list kernels, k = 50, on rows whose top-k set
    reaches far below its largest key (a search's bin sums floor keys more than S - 24
    binades below the largest, 24 at vocab 32000 and 22 at 128256, where each key's own mass
    would not: top-k then top-p's warp path, top_k_set_in_warp.cuh, leaves such a row to the
    searches and settles the others in one warp; so do joint's paths in clusters of 4 and 8,
    joint_top_k_set_draw and joint_top_p_in_set_draw). Row 0: the top
    50 are 2^-1 .. 2^-50, one a binade, with p = 0.9 (the threshold 2^-4 is shallow, the set
    49 binades deep). Row 1: the top 50 span 20 binades, distinct, with p = 0.99999, so that
    the threshold lies some 17 binades down and every mass in the set counts. The rest of each
    row is far smaller, at random places. Tokens equal the reference's."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "cluster")
    g = gen(75)
    probs = torch.rand(2, vocab, device=DEV, generator=g, dtype=torch.float64)
    probs[0] *= 2.0**-52
    probs[1] *= 2.0**-40
    j = torch.arange(50, device=DEV, dtype=torch.float64)
    top = torch.stack([2.0 ** -(1 + j), 2.0 ** -(1 + torch.floor(j * 20 / 50)) * (1 + j / 128)])
    for row in range(2):
        probs[row, torch.randperm(vocab, device=DEV, generator=g)[:50]] = top[row]
    probs = probs.float()
    k = torch.tensor([50, 50], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.9, 0.99999], device=DEV)
    assert_samplers_match_reference(("top_k_first", "joint"), probs, k, p, 0.1, many(2, 16), 27, 10)


@pytest.mark.parametrize("threads", ["512", "1024"])
def test_top_k_mask_and_renorm_from_the_list_of_unaligned_rows(threads, monkeypatch):
    """The output written from the level-0 list (fill, then the kept elements at their
    positions) for rows that start off a 16-byte boundary, with a row length that is not a
    multiple of four and a row stride wider than the row; outputs start poisoned (conftest)."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_ROW_THREADS", threads)
    vocab, offset, rows = 65539, 3, 6
    k = torch.tensor([1, 7, 64, 100, 33, 2], device=DEV, dtype=torch.int32)
    for dtype in (torch.float32, torch.bfloat16):
        logits = make_logits(rows, vocab + offset, seed=11, dtype=dtype)[:, offset:]
        want = ref.top_k_mask_logits(logits, k)
        assert torch.equal(aotinfer.top_k_mask_logits(logits, k), want), f"{dtype}"
    probs = make_probs(rows, vocab + offset, seed=12)[:, offset:]
    want = ref.renorm_probs(probs, MODES["top_k"], k)
    torch.testing.assert_close(aotinfer.top_k_renorm_probs(probs, k), want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_top_p_on_rows_of_subnormal_and_lone_probabilities(vocab, sampling_kernel):
    """Top-p searches where the fixed-point masses have no implicit bit (subnormal bins,
    fixed_point.cuh) and where the crossing bin holds one element (the search stops after
    level 0). Rows 0-1: every probability subnormal (below 2^-126); rows 2-3: one element
    carries 0.95 of the mass, alone in its bin; rows 4-5: that element and a subnormal rest.
    Tokens and renorm equal the reference's."""
    rows = 6
    g = gen(vocab + 3)
    tiny = torch.rand(rows, vocab, device=DEV, generator=g) * 1e-39  # subnormal float32
    probs = tiny.clone()
    probs[2:4] = torch.rand(2, vocab, device=DEV, generator=g) * (0.1 / vocab)
    probs[2:, 17] = 0.95
    p = torch.tensor([0.5, 0.95, 0.9, 0.5, 0.94, 0.999], device=DEV)
    idx = many(rows, 64)
    got, _ = draw("top_p", probs, None, 0, p, 0.0, idx, 4, 0)
    want, _ = expect("top_p", probs, None, 0, p, 0.0, idx, 4, 0)
    assert_same_tokens(got, want, "top_p")
    torch.testing.assert_close(
        aotinfer.top_p_renorm_probs(probs, p),
        ref.renorm_probs(probs, MODES["top_p"], 0, p),
        rtol=1e-5,
        atol=0,
    )


@pytest.mark.parametrize("offset", [0, 3, 5])
def test_unaligned_and_strided_rows(offset, sampling_kernel):
    # Rows that start off a 16-byte boundary, with a row stride wider than the row.
    base = make_probs(40, 1000 + offset, seed=offset)
    probs = base[:, offset:]
    k, p, m = per_row_params(40, probs.size(1), seed=offset)
    assert_samplers_match_reference(MODES, probs, k, p, m, None, 5, 0)


# ----------------------------------------------------------------------------------------
# Frequencies against the exact filtered distribution


@pytest.mark.parametrize("vocab", [111, 32000])
@pytest.mark.parametrize("name", SAMPLERS)
def test_frequencies_match_the_filtered_distribution(name, vocab, sampling_kernel):
    rows, n = 2, 1 << 17
    logits = make_logits(rows, vocab, seed=vocab, scale=2.0)
    probs = torch.softmax(logits, dim=-1)
    k, p, m = (20 if vocab == 111 else 400), 0.8, 0.02
    tokens, _ = draw(name, probs, logits, k, p, m, many(rows, n), 31, 0)
    for r in range(rows):
        if name in MODES:
            want = filtered_distribution(probs[r], MODES[name], k, p, m)
        elif name == "logits":
            want = torch.softmax(logits[r].double(), dim=-1)
        else:
            order = name[len("logits_") :]
            want = filtered_distribution(probs[r], MODES[order], k, p)
        assert_chi_square(tokens[r * n : (r + 1) * n], want, n, f"{name} row {r}")


@pytest.mark.parametrize("vocab", [128256, 256000])
@pytest.mark.parametrize("name", ["probs", "logits"])
def test_peaked_large_vocabulary_is_unbiased(name, vocab, sampling_kernel):
    """One token with p = 0.99 and the rest spread over the vocabulary. A race whose
    exponentials are too coarse near 0 (E = -log(u) with a 24-bit u makes E = 0 with
    probability 2^-24 per token) hands the tail about V * 2^-24 extra mass: 1.4% instead of
    1% at V = 128256, 1.9% at V = 256000, while this test resolves 0.1%. philox.cuh forms E
    as -log1p(-u) from a 32-bit u for this reason."""
    n = 1 << 18
    probs = torch.full((1, vocab), 0.01 / (vocab - 1), device=DEV)
    probs[0, 1234] = 0.99
    idx = torch.zeros(n, dtype=torch.int64, device=DEV)
    if name == "probs":
        tokens = aotinfer.sampling_from_probs(probs, idx, seed=3, offset=0)
    else:
        tokens = aotinfer.sampling_from_logits(probs.log(), idx, seed=3, offset=0)
    head = float((tokens == 1234).double().mean())
    sigma = math.sqrt(0.99 * 0.01 / n)
    assert abs(head - 0.99) < 6 * sigma, f"head frequency {head:.5f}, expected 0.99 +- {sigma:.1e}"


@pytest.mark.parametrize("name", ["top_k", "top_p", "min_p", "top_k_first", "joint"])
def test_never_outside_the_kept_set_on_a_large_vocabulary(name):
    rows, n, vocab = 4, 8192, 151936
    probs = make_probs(rows, vocab, seed=17, scale=4.0)
    k = torch.tensor([1, 50, 1000, 20000], device=DEV, dtype=torch.int32)
    p = torch.tensor([0.3, 0.6, 0.9, 0.99], device=DEV)
    m = torch.tensor([0.5, 0.1, 0.01, 0.001], device=DEV)
    tokens, valid = draw(name, probs, None, k, p, m, many(rows, n), 77, 0)
    assert valid.all()
    kept = ref.kept_mask(probs, MODES[name], k, p, m)
    src = many(rows, n)
    assert kept[src, tokens.long()].all()


def test_chain_speculative_first_token_follows_the_target():
    vocab, n_req = 111, 1 << 17
    g = gen(4)
    draft = torch.softmax(torch.randn(1, 1, vocab, device=DEV, generator=g) * 2, -1)
    target = torch.softmax(torch.randn(1, 2, vocab, device=DEV, generator=g) * 2, -1)
    ids = torch.multinomial(draft[0, 0], n_req, replacement=True, generator=g).reshape(n_req, 1)
    out, _, _ = aotinfer.chain_speculative_sampling(
        draft.expand(n_req, 1, vocab).contiguous(),
        ids,
        target.expand(n_req, 2, vocab).contiguous(),
        seed=9,
        offset=0,
    )
    assert_chi_square(out[:, 0], target[0, 0], n_req, "chain position 0")


# ----------------------------------------------------------------------------------------
# Renormalisation, masking, top-k selection


# (128256, 1): one row of a large vocabulary, which the cluster kernels run in clusters of 16.
RENORM_SHAPES = [
    (111, 1),
    (111, 989),
    (32000, 99),
    (128256, 1),
    (128256, 7),
    (151936, 3),
    (256000, 2),
]
# Two units in the last place of the output dtype; float16 outputs below 6e-5 are subnormal,
# spaced 6e-8 apart, hence its absolute tolerance.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ATOL = {torch.float32: 1e-9, torch.float16: 1.2e-7, torch.bfloat16: 1e-9}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("vocab,batch", RENORM_SHAPES)
def test_top_k_renorm_matches_reference(vocab, batch, dtype, sampling_kernel):
    probs = make_probs(batch, vocab, seed=vocab + batch).to(dtype)
    k, _, _ = per_row_params(batch, vocab, seed=batch)
    out = aotinfer.top_k_renorm_probs(probs, k)
    assert out.dtype == dtype and out.shape == probs.shape
    want = ref.renorm_probs(probs, MODES["top_k"], k)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want.float(), rtol=RTOL[dtype], atol=ATOL[dtype])
    if dtype == torch.float32:
        assert torch.equal(out > 0, want > 0)
        torch.testing.assert_close(
            out.double().sum(-1),
            torch.ones(batch, device=DEV, dtype=torch.float64),
            rtol=0,
            atol=1e-5,
        )


@pytest.mark.parametrize("scalar", [False, True])
@pytest.mark.parametrize("vocab,batch", RENORM_SHAPES)
def test_top_p_renorm_matches_reference(vocab, batch, scalar, sampling_kernel):
    probs = make_probs(batch, vocab, seed=vocab * 3 + batch)
    _, p, _ = per_row_params(batch, vocab, seed=batch + 1)
    if scalar:
        p = 0.7
    out = aotinfer.top_p_renorm_probs(probs, p)
    assert out.dtype == torch.float32
    want = ref.renorm_probs(probs, MODES["top_p"], 0, p)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-9)
    assert torch.equal(out > 0, want > 0)
    torch.testing.assert_close(
        out.double().sum(-1), torch.ones(batch, device=DEV, dtype=torch.float64), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rowwise", ["rowwise", "rowwise-no-gather"])
def test_top_p_renorm_from_the_list_and_from_the_row(rowwise, dtype, monkeypatch):
    """The top-p renormalisation row kernel writes a kept set that its gather pass could list
    (the crossing bin and every key above it, in shared memory) from that list, and any other
    from a pass over the row. Rows of several spreads and top_p from 0.02 to 0.99 give kept
    sets of a few keys to most of the row, on both sides of the list's capacity."""
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    monkeypatch.setenv("AOTINFER_SAMPLING_GATHER", "off" if rowwise.endswith("no-gather") else "on")
    vocab, rows = 128256, 24
    scales = torch.tensor([0.3, 1.0, 3.0], device=DEV).repeat(rows // 3)
    probs = torch.softmax(make_logits(rows, vocab, seed=63) * scales[:, None], dim=-1).to(dtype)
    p = torch.linspace(0.02, 0.99, rows, device=DEV)
    out = aotinfer.top_p_renorm_probs(probs, p)  # poisoned first (conftest)
    assert out.dtype == torch.float32  # any input dtype is read as float32 (API.md)
    want = ref.renorm_probs(probs.float(), MODES["top_p"], 0, p)
    kept = (want > 0).sum(-1)
    assert kept.min() < 2000 and kept.max() > 60000  # listed and unlisted kept sets
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-9)
    assert torch.equal(out > 0, want > 0)


def flat_rows_with_traps(vocab):
    """Flat rows (softmax of s x randn) of several spreads and top_p values, and rows built to
    mislead a search that estimates the crossing from a sample of the row (session 66's lab
    AOTINFER_LAB_TOP_P_BAND, refuted and removed; dev/NOTES.md item 98): large keys in a few
    groups near the row's start, far above the rest or within a few binades of its largest,
    subnormal keys (a mass a fixed-point unit floors), an unnormalised row, and a row of few
    distinct values (ties at the crossing). (probs, top_p)."""
    scales = [0.5, 1.0, 2.0, 1.0, 0.5, 1.0, 2.0, 1.0]
    logits = make_logits(len(scales) + 5, vocab, seed=66, scale=1.0)
    logits[: len(scales)] *= torch.tensor(scales, device=DEV)[:, None]
    probs = torch.softmax(logits, dim=-1)
    trap = len(scales)
    probs[trap, 4:28] = 0.05  # ~55% of the row's mass in groups 1-6, far above the rest
    probs[trap + 1, 4:60] = 6 * probs[trap + 1].max()  # within a few binades of the largest
    probs[trap + 2, 1000:1010] = 1e-38 * probs[trap + 2, 1000:1010]  # subnormal keys
    probs[trap + 3] *= 3.0e30
    probs[trap + 4] = torch.softmax(torch.round(logits[trap + 4] * 4) / 4, dim=-1)  # ties
    p = torch.tensor([0.9, 0.9, 0.9, 0.5, 0.7, 0.95, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9], device=DEV)
    return probs, p


def test_top_p_renorm_of_flat_rows_matches_the_cluster_kernels(monkeypatch):
    """Top-p renormalisation of flat rows of 128256, whose kept sets are too large for the row
    kernel's kept-set list (its output pass reads the row), and of flat_rows_with_traps' other
    rows: the row kernels' output equals the cluster kernels' bit for bit (the same fixed-point
    kept mass and unit), and its kept set the reference's."""
    probs, p = flat_rows_with_traps(128256)
    monkeypatch.setenv("AOTINFER_SAMPLING_GATHER", "on")
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
    rowwise = aotinfer.top_p_renorm_probs(probs, p)  # poisoned first (conftest)
    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "cluster")
    cluster = aotinfer.top_p_renorm_probs(probs, p)
    want = ref.renorm_probs(probs, MODES["top_p"], 0, p)
    assert ((want > 0).sum(-1)[:8] > 20000).sum() >= 6  # kept sets beyond the kept-set list
    assert torch.equal(rowwise, cluster)
    assert torch.equal(rowwise > 0, want > 0)
    torch.testing.assert_close(rowwise, want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("vocab,batch", RENORM_SHAPES)
def test_top_k_mask_logits_matches_reference(vocab, batch, dtype, sampling_kernel):
    logits = make_logits(batch, vocab, seed=vocab + 2 * batch, dtype=dtype)
    k, _, _ = per_row_params(batch, vocab, seed=batch + 2)
    out = aotinfer.top_k_mask_logits(logits, k)
    assert out.dtype == dtype
    assert torch.equal(out, ref.top_k_mask_logits(logits, k))
    out = aotinfer.top_k_mask_logits(logits, 5)
    assert torch.equal(out, ref.top_k_mask_logits(logits, 5))


ROW_FILTERS = ("top_k_mask", "top_k_renorm", "top_p_renorm")


def cluster_bound(op, vocab, sms):
    """sample_launch.cu's row_filter_max_cluster_rows / sampler_max_cluster_rows under
    use_slice_kernels' general bound (rows x 8 <= 4 x SMs): the most rows auto gives the
    cluster kernels (bounds measured on 132 SMs, scaled by the SMs)."""
    general = 4 * sms // 8
    narrow = vocab <= 81920
    if op in ROW_FILTERS and vocab > 81920:
        at_132 = {"top_k_mask": 38, "top_k_renorm": 34, "top_p_renorm": 45}[op]
    elif op in ROW_FILTERS:
        at_132 = 62 if vocab > 49152 else (40 if op == "top_p_renorm" else 30)
    elif op == "min_p" and (narrow or vocab > 131072):
        at_132 = 62 if narrow else 60
    elif op == "top_k" and not narrow:
        at_132 = 47 if vocab > 163840 else 60
    elif op in ("joint", "top_k_first") and vocab > 131072:
        at_132 = 51
    else:
        return general
    return min(at_132 * sms // 132, general)


def launched_sampling_kernels(fn):
    """Names of the row filter and sampler kernels fn launches (torch.profiler's CUDA
    activity): the clusters' are *_slice_kernel, the row kernels' row_filter_kernel and
    sample_kernel."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.key for e in prof.key_averages() if "row_filter" in e.key or "sample_" in e.key}


SEEDED = {"seed": 11, "offset": 3}
BOUND_SAMPLERS = {
    "min_p": lambda x: aotinfer.min_p_sampling_from_probs(x, 0.1, **SEEDED),
    "top_k": lambda x: aotinfer.top_k_sampling_from_probs(x, 50, **SEEDED),
    "joint": lambda x: aotinfer.top_k_top_p_sampling_from_probs(
        x, 50, 0.9, filter_apply_order="joint", **SEEDED
    ),
    "top_k_first": lambda x: aotinfer.top_k_top_p_sampling_from_probs(x, 50, 0.9, **SEEDED),
}


def row_filter_call(op, rows, vocab, seed):
    """One row filter call on fresh rows, and the reference's output."""
    k, p, _ = per_row_params(rows, vocab, seed=seed)
    if op == "top_k_mask":
        x = make_logits(rows, vocab, seed=seed)
        return lambda: aotinfer.top_k_mask_logits(x, k), ref.top_k_mask_logits(x, k)
    x = make_probs(rows, vocab, seed=seed)
    if op == "top_k_renorm":
        return lambda: aotinfer.top_k_renorm_probs(x, k), ref.renorm_probs(x, MODES["top_k"], k)
    return lambda: aotinfer.top_p_renorm_probs(x, p), ref.renorm_probs(x, MODES["top_p"], 0, p)


BOUND_CASES = [
    ("top_k_mask", 32000),
    ("top_p_renorm", 40960),
    ("top_k_renorm", 65536),
    ("top_k_mask", 128256),
    ("top_p_renorm", 128256),
    ("top_k_renorm", 151936),
    ("min_p", 32000),
    ("min_p", 200064),
    ("top_k", 128256),
    ("top_k", 256000),
    ("joint", 151936),
    ("top_k_first", 200064),
]


@pytest.mark.parametrize("past", [0, 1], ids=["at", "past"])
@pytest.mark.parametrize("op,vocab", BOUND_CASES)
def test_auto_takes_the_row_kernels_past_an_ops_cluster_bound(op, vocab, past, monkeypatch):
    """At the op's bound auto takes the cluster kernels (*_slice_kernel), one row past it the
    row kernels; the output is the reference's (row filters) or the pinned family's tokens
    (samplers: both families draw the same token for a seed)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the cluster kernels run on sm_90+ only")
    monkeypatch.delenv("AOTINFER_SAMPLING_KERNEL", raising=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = cluster_bound(op, vocab, sms) + past
    if op in ROW_FILTERS:
        call, want = row_filter_call(op, rows, vocab, seed=vocab + rows)
    else:
        x = make_probs(rows, vocab, seed=vocab + rows)
        call = functools.partial(BOUND_SAMPLERS[op], x)
    names = launched_sampling_kernels(call)
    assert names and all(("slice_kernel" in n) != past for n in names), (rows, names)
    out = call()
    if op not in ROW_FILTERS:
        monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise" if past else "cluster")
        assert torch.equal(out, call())
    elif op == "top_k_mask":
        assert torch.equal(out, want)
    else:
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-9)
        assert torch.equal(out > 0, want > 0)


@pytest.mark.parametrize("offset", [3, 5])
def test_renorm_and_mask_of_unaligned_rows(offset, sampling_kernel):
    # Rows that start off a 16-byte boundary (every group then loads with tail checks) and
    # are long enough for several groups per thread of a 1024-thread row kernel.
    vocab = 20000
    probs = make_probs(24, vocab + offset, seed=offset)[:, offset:]
    logits = make_logits(24, vocab + offset, seed=offset + 1)[:, offset:]
    k, p, _ = per_row_params(24, vocab, seed=offset + 2)
    want = ref.renorm_probs(probs, MODES["top_k"], k)
    torch.testing.assert_close(aotinfer.top_k_renorm_probs(probs, k), want, rtol=1e-5, atol=1e-9)
    want = ref.renorm_probs(probs, MODES["top_p"], 0, p)
    torch.testing.assert_close(aotinfer.top_p_renorm_probs(probs, p), want, rtol=1e-5, atol=1e-9)
    assert torch.equal(aotinfer.top_k_mask_logits(logits, k), ref.top_k_mask_logits(logits, k))


def test_top_k_mask_of_distinct_values_keeps_exactly_k():
    logits = torch.stack([torch.randperm(50000, device=DEV).float() for _ in range(4)])
    k = torch.tensor([1, 10, 1000, 49999], device=DEV, dtype=torch.int32)
    out = aotinfer.top_k_mask_logits(logits, k)
    assert torch.isfinite(out).sum(-1).tolist() == k.tolist()


def test_top_k_mask_turns_nan_into_minus_inf(sampling_kernel):
    # NaN logits act as -inf everywhere (aotinfer.sampling's contract), with or without a
    # filter, so that top_k_top_p_sampling_from_logits never softmaxes a NaN row.
    logits = make_logits(3, 1000, seed=3)
    logits[:, 7] = NAN
    for k in (5, 999, 1000, 5000):
        out = aotinfer.top_k_mask_logits(logits, k)
        assert not out.isnan().any(), f"k={k}"
        assert torch.equal(out, ref.top_k_mask_logits(logits, k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("k", [1, 50, 256, 2048])
@pytest.mark.parametrize("vocab,batch", [(111, 5), (32000, 99), (128256, 8), (256000, 2)])
def test_top_k_select_matches_reference(vocab, batch, k, dtype):
    k = min(k, vocab)
    x = make_logits(batch, vocab, seed=k + vocab, dtype=dtype)  # bfloat16: many ties
    for sorted_ in (False, True):
        values, indices = aotinfer.top_k(x, k, sorted=sorted_)
        want_v, want_i = ref_topk.top_k(x, k, sorted=sorted_)
        assert values.dtype == dtype and indices.dtype == torch.int64
        assert torch.equal(indices, want_i), f"sorted={sorted_}"
        assert torch.equal(values, want_v)
    tv, _ = torch.topk(x.float(), k, sorted=True)
    assert torch.equal(aotinfer.top_k(x, k, sorted=True)[0].float(), tv)


@pytest.mark.parametrize("vocab,batch", [(111, 5), (32000, 3)])
def test_top_k_select_tie_break_large(vocab, batch):
    """tie_break=LARGE keeps the larger indices of a tie at the k-th value (bfloat16: many
    ties): against the reference path and against the definition."""
    x = make_logits(batch, vocab, seed=vocab + 7, dtype=torch.bfloat16)
    k = 50
    for sorted_ in (False, True):
        values, indices = aotinfer.top_k(
            x, k, sorted=sorted_, tie_break=aotinfer.TopKTieBreak.LARGE
        )
        want_v, want_i = aotinfer.top_k(x.cpu(), k, sorted=sorted_, tie_break=2)
        assert torch.equal(indices.cpu(), want_i) and torch.equal(values.cpu(), want_v)
    rows = x.float().cpu().tolist()
    for r, row in enumerate(rows):
        want = sorted(range(vocab), key=lambda i: (-row[i], -i))[:k]
        assert sorted(indices[r].tolist()) == sorted(want)


def test_wide_per_row_top_k_means_no_filter():
    """int64 per-row k past int32 saturates (k >= V or k < 1: no filter), as on the CPU."""
    probs = make_probs(4, 32000, seed=11)
    k = torch.tensor([2**32 + 1, -(2**32) + 2, 50, 1], device=DEV)
    out = aotinfer.top_k_renorm_probs(probs, k)
    want = aotinfer.top_k_renorm_probs(probs.cpu(), k.cpu())
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-9)
    assert bool((out[:2] > 0).all()) and int((out[3] > 0).sum()) == 1


def test_top_k_select_nan_ranks_last():
    x = make_logits(2, 300, seed=1)
    x[0, :290] = NAN  # 10 values left: NaN fills the rest of k = 16
    values, indices = aotinfer.top_k(x, 16, sorted=True)
    want_v, want_i = ref_topk.top_k(x, 16, sorted=True)
    assert torch.equal(indices, want_i)
    assert values[0, 10:].isnan().all() and not values[0, :10].isnan().any()


# ----------------------------------------------------------------------------------------
# Chain speculative sampling


def chain_inputs(batch, n, vocab, seed):
    g = gen(seed)
    draft = torch.softmax(torch.randn(batch, n, vocab, device=DEV, generator=g) * 2, -1)
    target = torch.softmax(torch.randn(batch, n + 1, vocab, device=DEV, generator=g) * 2, -1)
    target[:, :n] = 0.5 * target[:, :n] + 0.5 * draft  # overlap: some drafts accepted
    ids = torch.multinomial(draft.reshape(-1, vocab), 1, generator=g).reshape(batch, n)
    return draft, ids, target


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(
    "batch,n,vocab", [(1, 1, 111), (99, 4, 32000), (989, 2, 111), (8, 6, 128256)]
)
def test_chain_speculative_matches_reference(batch, n, vocab, ids_dtype):
    draft, ids, target = chain_inputs(batch, n, vocab, seed=batch + n)
    ids = ids.to(ids_dtype)
    acc0 = torch.randint(0, 5, (batch,), device=DEV, dtype=torch.int32)
    emi0 = torch.randint(0, 5, (batch,), device=DEV, dtype=torch.int32)
    acc, emi = acc0.clone(), emi0.clone()
    seed = torch.randint(0, 2**62, (batch,), device=DEV, generator=gen(batch))
    offset = torch.tensor([64], device=DEV)
    out, a, e = aotinfer.chain_speculative_sampling(
        draft, ids, target, acc, emi, seed=seed, offset=offset
    )
    assert a is acc and e is emi and out.dtype == torch.int32 and out.shape == (batch, n + 1)
    w_out, w_acc, w_emi = ref.chain_speculative_sampling(
        draft, ids, target, seed=seed, offset=offset
    )
    assert torch.equal(acc - acc0, w_acc) and torch.equal(emi - emi0, w_emi)
    mismatched = int((out.cpu() != w_out.cpu()).sum())  # -1 after the emitted token is expected
    assert mismatched <= int(1e-3 * out.numel()), f"chain: {mismatched} of {out.numel()} differ"
    assert torch.equal(emi - emi0 + 1, (out != -1).sum(1).int())
    if batch >= 99:  # the inputs give both acceptances and rejections
        assert 0 < float((emi - emi0).float().mean()) < n


def test_chain_speculative_without_drafts_draws_the_bonus_token():
    """n = 0: the kernel's bonus-token draw alone (the provider refused it before, its empty
    draft tensors having torch's strides for an empty dimension), as the reference draws."""
    g = gen(77)
    target = torch.softmax(torch.randn(99, 1, 32000, device=DEV, generator=g) * 2, -1)
    draft = torch.empty(99, 0, 32000, device=DEV)
    ids = torch.empty(99, 0, dtype=torch.int32, device=DEV)
    acc = torch.zeros(99, dtype=torch.int32, device=DEV)
    out, a, e = aotinfer.chain_speculative_sampling(draft, ids, target, acc, seed=9, offset=4)
    w_out, w_acc, w_emi = ref.chain_speculative_sampling(draft, ids, target, seed=9, offset=4)
    assert out.shape == (99, 1) and torch.equal(out, w_out)
    assert not a.any() and not e.any() and not w_acc.any() and not w_emi.any()


def test_chain_speculative_edge_cases():
    draft, ids, target = chain_inputs(6, 3, 111, seed=1)
    ids[0, 0] = -1  # out of range: rejected, never read
    ids[1, 0] = 111
    target[2] = torch.cat([draft[2], draft[2, :1]])  # target == draft: everything accepted
    draft[3, 1] = NAN
    target[4, 0] = NAN
    out, acc, emi = aotinfer.chain_speculative_sampling(draft, ids, target, seed=5, offset=0)
    assert emi[0] == 0 and emi[1] == 0
    assert emi[2] == 3 and acc[2] == 3
    assert (out >= -1).all() and (out < 111).all()
    w_out, w_acc, w_emi = ref.chain_speculative_sampling(draft, ids, target, seed=5, offset=0)
    assert torch.equal(out, w_out) and torch.equal(acc, w_acc) and torch.equal(emi, w_emi)


# ----------------------------------------------------------------------------------------
# Randomness: generators, seeds, offsets, streams


@pytest.mark.parametrize("name", SAMPLERS)
def test_same_generator_state_same_tokens_and_a_new_seed_new_tokens(name):
    probs = make_probs(256, 4000, seed=5)
    logits = probs.log()
    k, p, m = per_row_params(256, 4000, seed=6)
    g = torch.Generator(device=DEV).manual_seed(123)

    def run(generator):
        kw = dict(generator=generator)
        if name == "probs":
            return aotinfer.sampling_from_probs(probs, **kw)
        if name == "top_k":
            return aotinfer.top_k_sampling_from_probs(probs, k, **kw)
        if name == "top_p":
            return aotinfer.top_p_sampling_from_probs(probs, p, **kw)
        if name == "min_p":
            return aotinfer.min_p_sampling_from_probs(probs, m, **kw)
        if name in ("top_k_first", "joint"):
            return aotinfer.top_k_top_p_sampling_from_probs(
                probs, k, p, filter_apply_order=name, **kw
            )
        if name == "logits":
            return aotinfer.sampling_from_logits(logits, **kw)
        return aotinfer.top_k_top_p_sampling_from_logits(
            logits, k, p, filter_apply_order=name[len("logits_") :], **kw
        )

    a = run(g)
    b = run(g)  # the generator advanced: fresh numbers
    g.manual_seed(123)
    assert torch.equal(run(g), a)
    assert float((a != b).float().mean()) > 0.5
    g.manual_seed(124)
    assert float((run(g) != a).float().mean()) > 0.5
    torch.cuda.manual_seed(9)
    c = run(None)  # the device's default generator
    torch.cuda.manual_seed(9)
    assert torch.equal(run(None), c)


@pytest.mark.parametrize(
    "name,increment", [("probs", 1), ("top_k", 32), ("min_p", 1), ("logits", 3000)]
)
def test_generator_advance_and_the_offset_used(name, increment):
    batch, vocab = 10, 3000
    probs = make_probs(batch, vocab, seed=8)
    g = torch.Generator(device=DEV).manual_seed(77)
    seed, offset0 = g.get_state().view(torch.int64).tolist()
    if name == "probs":
        tokens = aotinfer.sampling_from_probs(probs, generator=g)
    elif name == "top_k":
        tokens = aotinfer.top_k_sampling_from_probs(probs, 50, generator=g)
    elif name == "min_p":
        tokens = aotinfer.min_p_sampling_from_probs(probs, 0.1, generator=g)
    else:
        tokens = aotinfer.sampling_from_logits(probs.log(), generator=g)
    advanced = offset0 + (batch * increment + 3) // 4 * 4
    assert g.get_state().view(torch.int64).tolist() == [seed, advanced]
    want, _ = expect(name, probs, probs.log(), 50, 1.0, 0.1, None, seed, advanced)
    assert_same_tokens(tokens, want, name)


def test_per_row_seeds_and_offsets_are_honoured_row_by_row():
    batch, vocab = 64, 5000
    probs = make_probs(batch, vocab, seed=12)
    seeds = torch.randint(0, 2**62, (batch,), device=DEV, generator=gen(1))
    offsets = torch.randint(0, 2**40, (batch,), device=DEV, generator=gen(2))
    got = aotinfer.top_p_sampling_from_probs(probs, 0.9, seed=seeds, offset=offsets)
    for b in range(0, batch, 9):
        alone = aotinfer.top_p_sampling_from_probs(
            probs, 0.9, seed=int(seeds[b]), offset=int(offsets[b])
        )
        assert got[b] == alone[b], f"row {b}"
    want, _ = ref.sample_from_probs(probs, None, MODES["top_p"], 0, 0.9, seed=seeds, offset=offsets)
    assert_same_tokens(got, want)
    if hasattr(torch, "uint64"):
        got_u = aotinfer.top_p_sampling_from_probs(
            probs, 0.9, seed=seeds.view(torch.uint64), offset=offsets.view(torch.uint64)
        )
        assert torch.equal(got_u, got)


def test_other_cuda_stream_same_tokens():
    probs = make_probs(128, 32000, seed=13)
    a = aotinfer.top_k_top_p_sampling_from_probs(probs, 100, 0.9, seed=1, offset=0)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        b = aotinfer.top_k_top_p_sampling_from_probs(probs, 100, 0.9, seed=1, offset=0)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(a, b)
    c = aotinfer.top_k_top_p_sampling_from_probs(probs, 100, 0.9, seed=2, offset=0)
    assert float((a != c).float().mean()) > 0.5


# ----------------------------------------------------------------------------------------
# Edge cases


def test_top_k_one_and_min_p_one_give_the_argmax(sampling_kernel):
    probs = make_probs(99, 32000, seed=14)
    argmax = probs.argmax(-1)
    assert torch.equal(
        aotinfer.top_k_sampling_from_probs(probs, 1, seed=1, offset=0).long(), argmax
    )
    assert torch.equal(
        aotinfer.min_p_sampling_from_probs(probs, 1.0, seed=1, offset=0).long(), argmax
    )
    s = aotinfer.top_k_top_p_sampling_from_probs(probs, 1, 0.5, seed=1, offset=0)
    assert torch.equal(s.long(), argmax)
    s = aotinfer.top_k_top_p_sampling_from_logits(probs.log(), 1, 0.5, seed=1, offset=0)
    assert torch.equal(s.long(), argmax)


def test_no_op_filters_give_the_unfiltered_tokens():
    probs = make_probs(99, 32000, seed=15)
    plain = aotinfer.sampling_from_probs(probs, seed=4, offset=8)
    kw = dict(seed=4, offset=8)
    assert torch.equal(aotinfer.top_k_sampling_from_probs(probs, 32000, **kw), plain)
    assert torch.equal(aotinfer.top_k_sampling_from_probs(probs, 10**9, **kw), plain)
    assert torch.equal(aotinfer.top_p_sampling_from_probs(probs, 1.0, **kw), plain)
    assert torch.equal(aotinfer.top_k_top_p_sampling_from_probs(probs, 40000, 1.0, **kw), plain)
    no_filter = torch.full((99,), 0, device=DEV, dtype=torch.int32)
    assert torch.equal(aotinfer.top_k_sampling_from_probs(probs, no_filter, **kw), plain)


def test_one_hot_all_equal_and_single_finite_rows(sampling_kernel):
    vocab = 32003  # the hot token sits in the partial last group of four
    probs = make_probs(4, vocab, seed=16)
    probs[0] = 0.0
    probs[0, vocab - 1] = 1.0  # one-hot
    probs[1] = 1.0 / vocab  # all equal: every filter keeps the whole row (ties)
    n = 1 << 18
    idx = torch.cat([many(1, 256), torch.ones(n, dtype=torch.int64, device=DEV)])
    uniform = torch.full((vocab,), 1 / vocab, dtype=torch.float64)
    for name in MODES:
        tokens, valid = draw(name, probs, None, 10, 0.5, 0.5, idx, 2, 0)
        assert valid.all(), name
        assert (tokens[:256] == vocab - 1).all(), name
        assert_chi_square(tokens[256:], uniform, n, name)
    logits = torch.full((2, vocab), -INF, device=DEV)
    logits[0, 5] = 0.0
    logits[1, vocab - 2] = 2.0
    for name in LOGIT_SAMPLERS:
        tokens, _ = draw(name, None, logits, 3, 0.5, 0.0, many(2, 64), 1, 0)
        assert (tokens[:64] == 5).all() and (tokens[64:] == vocab - 2).all(), name


def test_nan_and_degenerate_rows(sampling_kernel):
    vocab = 32000
    probs = make_probs(6, vocab, seed=18)
    clean = probs.clone()
    probs[1] = NAN
    probs[2] = 0.0
    probs[3, ::2] = NAN  # NaN entries: never drawn
    probs[3, 1::4] = -1.0  # negative entries: never drawn
    probs[4] = INF
    for name in MODES:
        k, p, m = per_row_params(6, vocab, seed=19)
        s, v = draw(name, probs, None, k, p, m, many(6, 200), 3, 0)
        rows = s.view(6, 200)
        valid = v.view(6, 200)
        assert valid[[0, 3, 5]].all() and not valid[[1, 2, 4]].any(), name
        assert (rows[[1, 2, 4]] == 0).all(), name
        assert (rows[3] % 2 == 1).all() and (rows[3] % 4 != 1).all(), name
        s_clean, _ = draw(name, clean, None, k, p, m, many(6, 200), 3, 0)
        assert torch.equal(rows[[0, 5]], s_clean.view(6, 200)[[0, 5]]), name
    logits = make_logits(3, vocab, seed=20)
    logits[0] = NAN
    logits[1, ::3] = NAN
    logits[2] = -INF
    for name in LOGIT_SAMPLERS:
        s, _ = draw(name, None, logits, 100, 0.9, 0.0, many(3, 100), 1, 0)
        assert (s[:100] == 0).all() and (s[200:] == 0).all(), name
        assert (s[100:200] % 3 != 0).all(), name


def test_check_nan_on_cuda():
    probs = make_probs(4, 1000, seed=21)
    probs[2, 3] = NAN
    with pytest.raises(ValueError, match=r"^Input probs contains NaN\.$"):
        aotinfer.top_p_sampling_from_probs(probs, 0.9, check_nan=True)
    with pytest.raises(ValueError, match=r"^Input logits contains NaN\.$"):
        aotinfer.sampling_from_logits(probs, check_nan=True)


def test_validation_on_cuda_happens_before_launch():
    probs = make_probs(4, 1000, seed=22)
    with pytest.raises(ValueError, match="top_p must be on cuda:0, like the input, got cpu"):
        aotinfer.top_p_sampling_from_probs(probs, torch.full((4,), 0.5))
    with pytest.raises(ValueError, match="seed tensor must be on cuda:0"):
        aotinfer.sampling_from_probs(
            probs,
            seed=torch.zeros(1, dtype=torch.int64),
            offset=torch.zeros(1, dtype=torch.int64, device=DEV),
        )
    with pytest.raises(ValueError, match="generator must be a generator of cuda:0"):
        aotinfer.sampling_from_probs(probs, generator=torch.Generator())
    with pytest.raises(ValueError, match="indices must be on cuda:0"):
        aotinfer.sampling_from_probs(probs, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="probs must be a dense \\(strided\\) tensor"):
        aotinfer.sampling_from_probs(probs.to_sparse(), seed=1, offset=1)
    beyond = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match=f"device is {beyond}, but this torch sees"):
        aotinfer.sampling.get_seed_and_offset(4, device=beyond)
    # A counter in draft_token_ids' memory would race with the kernel's reads of it.
    buf = torch.zeros(8, dtype=torch.int32, device=DEV)
    draft_probs = make_probs(6, 50, seed=23).view(2, 3, 50)
    target_probs = make_probs(8, 50, seed=24).view(2, 4, 50)
    with pytest.raises(ValueError, match="must not share memory with draft_token_ids"):
        aotinfer.chain_speculative_sampling(
            draft_probs, buf[:6].view(2, 3), target_probs, buf[4:6], seed=1, offset=1
        )


def test_rows_of_2_to_the_31_elements_are_refused_before_launch():
    """The kernels index a row's elements in 32 bits and count its groups of four as (n + 3)
    / 4 in int (segment_pass.cuh, row_access.cuh): a row longer than 2**31 - 4 is a
    ValueError naming the input, raised before any launch, for top_k and top_k_mask_logits
    too (they had no check: a row of 2**31 became INT_MIN elements). 8 GiB, then 4 GiB x 2."""
    probs = torch.empty(1, 2**31 - 3, device=DEV)
    message = r"probs rows must have at most 2147483644 elements, got 2147483645"
    with pytest.raises(ValueError, match=message):
        aotinfer.top_p_sampling_from_probs(probs, 0.9, seed=0, offset=0)
    with pytest.raises(ValueError, match=message):
        aotinfer.top_p_renorm_probs(probs, 0.9)
    del probs
    logits = torch.empty(1, 2**31, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"top_k: input rows must have at most 2147483644"):
        aotinfer.top_k(logits, 5)
    with pytest.raises(ValueError, match=r"top_k_mask_logits: logits rows must have at most"):
        aotinfer.top_k_mask_logits(logits, 5)
    del logits
    torch.cuda.empty_cache()


def test_empty_batch_launches_nothing():
    probs = make_probs(4, 100, seed=23)
    s, v = aotinfer.sampling_from_probs(
        probs, torch.zeros(0, dtype=torch.int32, device=DEV), seed=0, offset=0, return_valid=True
    )
    assert s.shape == (0,) and s.dtype == torch.int32 and v.shape == (0,)


# ----------------------------------------------------------------------------------------
# CUDA graphs


def test_cuda_graph_replay_with_new_values(sampling_kernel):
    batch, rows, vocab = 64, 16, 32000
    static_probs = make_probs(rows, vocab, seed=30)
    static_logits = make_logits(rows, vocab, seed=31)
    k = torch.full((rows,), 50, device=DEV, dtype=torch.int32)
    p = torch.full((rows,), 0.9, device=DEV)
    idx = torch.randint(0, rows, (batch,), device=DEV, generator=gen(1))
    seed = torch.zeros(batch, dtype=torch.int64, device=DEV)
    offset = torch.zeros(1, dtype=torch.int64, device=DEV)
    draft, ids, target = chain_inputs(8, 3, 111, seed=2)
    cseed = torch.zeros(1, dtype=torch.int64, device=DEV)

    def step():
        return (
            aotinfer.top_k_top_p_sampling_from_probs(
                static_probs, k, p, idx, seed=seed, offset=offset, return_valid=True
            ),
            aotinfer.sampling_from_logits(static_logits, idx, seed=seed, offset=offset),
            aotinfer.top_k_top_p_sampling_from_logits(
                static_logits, k, p, idx, filter_apply_order="joint", seed=seed, offset=offset
            ),
            aotinfer.top_k_renorm_probs(static_probs, k),
            aotinfer.top_k_mask_logits(static_logits, k),
            aotinfer.chain_speculative_sampling(draft, ids, target, seed=cseed, offset=offset),
        )

    step()  # warm-up outside capture (provider import, first launches)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for it in range(3):
        static_probs.copy_(make_probs(rows, vocab, seed=40 + it))
        static_logits.copy_(make_logits(rows, vocab, seed=50 + it))
        k.copy_(torch.randint(1, 500, (rows,), device=DEV, generator=gen(it), dtype=torch.int32))
        p.copy_(torch.rand(rows, device=DEV, generator=gen(it)) * 0.9 + 0.1)
        idx.copy_(torch.randint(0, rows, (batch,), device=DEV, generator=gen(60 + it)))
        seed.copy_(torch.randint(0, 2**62, (batch,), device=DEV, generator=gen(70 + it)))
        offset.fill_(16 * it)
        cseed.fill_(it + 1)
        graph.replay()
        torch.cuda.synchronize()
        (s, v), sl, sj, renorm, mask, (cout, cacc, cemi) = outs
        want, _ = ref.sample_from_probs(
            static_probs, idx, MODES["top_k_first"], k, p, seed=seed, offset=offset
        )
        assert_same_tokens(s, want, f"replay {it} top_k_top_p")
        assert v.all()
        want, _ = ref.sample_from_logits(static_logits, idx, seed=seed, offset=offset)
        assert_same_tokens(sl, want, f"replay {it} logits")
        want, _ = expect("logits_joint", None, static_logits, k, p, 0.0, idx, seed, offset)
        assert_same_tokens(sj, want, f"replay {it} logits joint")
        torch.testing.assert_close(
            renorm, ref.renorm_probs(static_probs, MODES["top_k"], k), rtol=1e-5, atol=1e-9
        )
        assert torch.equal(mask, ref.top_k_mask_logits(static_logits, k))
        w_out, w_acc, w_emi = ref.chain_speculative_sampling(
            draft, ids, target, seed=cseed, offset=offset
        )
        assert torch.equal(cout, w_out)
        # The counters were created inside the capture (zeros, then added to): one call's worth.
        assert torch.equal(cacc, w_acc) and torch.equal(cemi, w_emi)


def test_generator_cannot_be_advanced_during_capture():
    probs = make_probs(4, 1000, seed=24)
    aotinfer.sampling_from_probs(probs)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="cannot be read or advanced during CUDA graph capture"):
        with torch.cuda.graph(graph):
            aotinfer.sampling_from_probs(probs)


# ----------------------------------------------------------------------------------------
# torch.compile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_matches_eager(backend):
    torch._dynamo.reset()
    probs = make_probs(32, 32000, seed=25)
    k, p, _ = per_row_params(32, 32000, seed=26)

    def fn(x):
        return (
            aotinfer.sampling_from_probs(x),
            aotinfer.top_k_top_p_sampling_from_logits(x.log(), k, p),
            aotinfer.top_k_renorm_probs(x, k),
        )

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    torch.cuda.manual_seed(3)
    got = compiled(probs)
    torch.cuda.manual_seed(3)
    want = fn(probs)
    assert torch.equal(got[0], want[0])
    assert_same_tokens(got[1], want[1])
    torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-9)
    torch._dynamo.reset()
