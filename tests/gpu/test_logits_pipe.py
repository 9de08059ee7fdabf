"""LogitsPipe on CUDA: compiled and uncompiled pipes agree on probabilities and on sampled
distributions, a pipe returns the same tokens as the direct call it compiles to from the
same generator state, and pipes replay in CUDA graphs with new tensor parameters.

Frequency tests draw ``R`` samples from every row (through ``indices``) and compare the
counts with the exact distribution the pipe should sample: the probabilities its prefix
(the pipe without ``Sample``) returns, renormalised. The statistic is Pearson's
chi-square, cells with an expected count below 5 pooled into one cell per row (dropped
when even that is below 5), summed over rows; its degrees of freedom come from the cell
count, and the bound is the chi-square quantile at a tail of about 3e-7 (Wilson-Hilferty,
z = 5), so the bound follows the number of samples through the cells they make testable.
Compiled and uncompiled counts are also compared directly (two-sample chi-square, which
needs no pooling: each term has mean 1). Distributions are peaked (scaled logits, low
temperature, filters) so that a few thousand draws per row suffice for the large
vocabularies.
"""

from __future__ import annotations

import math

import pytest
import torch

from aotinfer import sampling
from aotinfer.logits_processor import (
    LogitsPipe,
    MinP,
    Sample,
    Softmax,
    Temperature,
    TensorType,
    TopK,
    TopP,
)

BATCHES = [1, 99, 989]
VOCABS = [111, 32000, 128256]
L, P = TensorType.LOGITS, TensorType.PROBS


def _logits(batch, vocab, seed, scale=1.0, distribution="normal"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if distribution == "gumbel":
        u = torch.rand(batch, vocab, device="cuda", generator=g).clamp_min(1e-20)
        return -torch.log(-torch.log(u)) * scale
    return torch.randn(batch, vocab, device="cuda", generator=g) * scale


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _clone(g):
    c = torch.Generator(device="cuda")
    c.set_state(g.get_state())
    return c


def _chi_square_bound(df: int, z: float = 5.0) -> float:
    """The chi-square(df) quantile at a tail of about 3e-7 (Wilson-Hilferty)."""
    if df <= 0:
        return 1e-9
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


# --- compiled and uncompiled: probabilities ------------------------------------------------------


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("distribution", ["normal", "gumbel"])
@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.1, "per_row"])
def test_compiled_and_uncompiled_probabilities_agree(batch, vocab, distribution, temperature):
    x = _logits(batch, vocab, seed=batch * 7 + vocab, distribution=distribution)
    if temperature == "per_row":
        temperature = torch.rand(batch, device="cuda") * 0.9 + 0.1
    pipes = [
        [Temperature(), Softmax()],  # fused into one softmax kernel
        [Temperature(), Softmax(), TopK()],
        [Temperature(), Softmax(), MinP()],
    ]
    if isinstance(temperature, float) and temperature == 1.0:
        # Top-p only on flat rows: on peaked rows a float32 rounding difference between
        # the fused and the torch softmax can move a large token across the nucleus edge.
        pipes.append([Temperature(), Softmax(), TopP()])
    kwargs = dict(temperature=temperature, top_k=20, top_p=0.9, min_p=0.05)
    for processors in pipes:
        compiled = LogitsPipe(processors)
        uncompiled = LogitsPipe(processors, compile=False)
        assert compiled.compiled_ops[0].__class__.__name__ == "FusedTemperatureSoftmaxOp"
        a = compiled(x, **kwargs)
        b = uncompiled(x, **kwargs)
        assert a.shape == b.shape == x.shape
        assert not a.isnan().any()
        # The fused softmax and torch's round differently in the last bit, so a token whose
        # probability ties the top-k / min-p / top-p cut-off to within a rounding can be kept
        # by one pipe and dropped by the other. Such boundary flips are allowed (at most one
        # per 10^5 entries, and only a token and its row's renormalisation); everything
        # else must agree to atol=1e-5.
        flips = (a > 0) != (b > 0)
        assert int(flips.sum()) <= max(1, a.numel() // 100_000), int(flips.sum())
        same_rows = ~flips.any(dim=-1)
        torch.testing.assert_close(a[same_rows], b[same_rows], atol=1e-5, rtol=0)


# --- compiled and uncompiled: sampled distributions ----------------------------------------------


def _counts(tokens: torch.Tensor, batch: int, vocab: int) -> torch.Tensor:
    """Per-(row, token) counts of draws made with ``indices = arange(batch).repeat(R)``."""
    rows = torch.arange(tokens.numel(), device=tokens.device) % batch
    assert ((tokens >= 0) & (tokens < vocab)).all()
    flat = rows * vocab + tokens.long()
    counts = torch.zeros(batch * vocab, dtype=torch.float32, device=tokens.device)
    counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.float32))
    return counts.view(batch, vocab)


def _one_sample(counts: torch.Tensor, probs: torch.Tensor, per_row: int):
    """(statistic, df) of counts against ``per_row * probs`` (rows renormalised), pooling
    cells below 5 expected per row; also checks that zero-probability tokens never come."""
    q = probs / probs.sum(-1, keepdim=True)
    assert (counts[q == 0] == 0).all(), "a token outside the kept set was sampled"
    expected = q * per_row
    big = expected >= 5
    stat = torch.where(big, (counts - expected) ** 2 / expected.clamp_min(1e-30), 0.0)
    stat = stat.sum(dtype=torch.float64)
    e_rest = per_row - torch.where(big, expected, 0.0).sum(-1, dtype=torch.float64)
    e_rest = e_rest.clamp_min(0)  # rounding when the big cells hold all the mass
    o_rest = per_row - torch.where(big, counts, 0.0).sum(-1, dtype=torch.float64)
    pooled = e_rest >= 5
    stat = stat + ((o_rest - e_rest)[pooled] ** 2 / e_rest[pooled]).sum()
    # A tail too small to test still must not be overdrawn.
    small = ~pooled
    e_small = e_rest[small].clamp_min(0)  # rounding can leave a tiny negative remainder
    assert (o_rest[small] <= e_small + 6 * e_small.sqrt() + 6).all()
    df = int(big.sum()) + int(pooled.sum()) - counts.size(0)
    return float(stat), df


def _two_sample(a: torch.Tensor, b: torch.Tensor):
    """(statistic, df) of two count tables of equal totals per row."""
    n = a + b
    used = n > 0
    stat = torch.where(used, (a - b) ** 2 / n.clamp_min(1), 0.0).sum(dtype=torch.float64)
    df = int(used.sum()) - a.size(0)
    return float(stat), df


def _joint_probs(probs, top_k, top_p):
    """Joint top-k/top-p: both sets measured on ``probs``, intersected (the kernels' own
    threshold searches decide each set)."""
    in_k = sampling.top_k_renorm_probs(probs, top_k) > 0
    in_p = sampling.top_p_renorm_probs(probs, top_p) > 0
    return torch.where(in_k & in_p, probs, 0.0)


SAMPLERS = {
    "temperature_softmax_sample": [Temperature(), Softmax(), Sample()],
    "temperature_softmax_topk_sample": [Temperature(), Softmax(), TopK(), Sample()],
    "softmax_topp_sample": [Softmax(), TopP(), Sample()],
    "softmax_minp_sample": [Softmax(), MinP(), Sample()],
    "temperature_softmax_topk_topp_sample": [Temperature(), Softmax(), TopK(), TopP(), Sample()],
    "joint_topk_topp_sample": [
        Temperature(),
        Softmax(),
        TopK(joint_topk_topp=True),
        TopP(),
        Sample(),
    ],
}
SAMPLER_KWARGS = dict(temperature=0.7, top_k=10, top_p=0.8, min_p=0.1)


def _draws_per_row(batch: int, vocab: int) -> int:
    total = 40_000 if vocab > 100_000 else 100_000
    return max(40, total // batch)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("case", sorted(SAMPLERS))
def test_compiled_and_uncompiled_sample_the_same_distribution(batch, vocab, case):
    processors = SAMPLERS[case]
    x = _logits(batch, vocab, seed=batch + vocab, scale=3.0)
    per_row = _draws_per_row(batch, vocab)
    indices = torch.arange(batch, device="cuda", dtype=torch.int32).repeat(per_row)
    counts = {}
    for compile in (True, False):
        pipe = LogitsPipe(processors, compile=compile)
        prefix = LogitsPipe(processors[:-1], compile=compile)
        tokens = pipe(x, indices=indices, generator=_gen(batch * 31 + compile), **SAMPLER_KWARGS)
        assert tokens.shape == (batch * per_row,) and tokens.dtype == torch.int32
        probs = prefix(x, **SAMPLER_KWARGS)
        if compile and case == "joint_topk_topp_sample":
            base = LogitsPipe(processors[:2])(x, **SAMPLER_KWARGS)
            probs = _joint_probs(base, SAMPLER_KWARGS["top_k"], SAMPLER_KWARGS["top_p"])
        counts[compile] = _counts(tokens, batch, vocab)
        stat, df = _one_sample(counts[compile], probs, per_row)
        assert stat < _chi_square_bound(df), (compile, stat, df)
        del tokens, probs
    if case != "joint_topk_topp_sample":  # joint filtering is a different distribution
        stat, df = _two_sample(counts[True], counts[False])
        assert stat < _chi_square_bound(df), (stat, df)


def test_masked_tokens_are_never_sampled():
    x = _logits(8, 32000, seed=5, scale=2.0)
    x[:, ::2] = float("-inf")
    indices = torch.arange(8, device="cuda", dtype=torch.int32).repeat(5000)
    for processors, input_type in (
        ([Sample()], L),
        ([Softmax(), Sample()], None),
        ([Temperature(), Softmax(), TopK(), Sample()], None),
        ([Softmax(), TopP(), Sample()], None),
        ([Softmax(), MinP(), Sample()], None),
    ):
        for compile in (True, False):
            pipe = LogitsPipe(processors, compile=compile, input_type=input_type)
            tokens = pipe(x, indices=indices, generator=_gen(3), **SAMPLER_KWARGS)
            assert (tokens % 2 == 1).all(), (processors, compile)


# --- same tokens as the direct call --------------------------------------------------------------


def _direct(case, x, g, k, p, m, t):
    s = sampling
    softmax = torch.softmax(x, -1)
    return {
        "temperature_softmax_sample": lambda: s.sampling_from_probs(
            s.softmax(x, temperature=t), generator=g
        ),
        "temperature_softmax_topk_sample": lambda: s.top_k_sampling_from_probs(
            s.softmax(x, temperature=t), k, generator=g
        ),
        "softmax_topp_sample": lambda: s.top_p_sampling_from_probs(softmax, p, generator=g),
        "softmax_minp_sample": lambda: s.min_p_sampling_from_probs(softmax, m, generator=g),
        "temperature_softmax_topk_topp_sample": lambda: s.top_p_sampling_from_probs(
            s.top_k_renorm_probs(s.softmax(x, temperature=t), k), p, generator=g
        ),
        "joint_topk_topp_sample": lambda: s.top_k_top_p_sampling_from_probs(
            s.softmax(x, temperature=t), k, p, filter_apply_order="joint", generator=g
        ),
        "logits_sample": lambda: s.sampling_from_logits(x, generator=g),
        "logits_topk_sample": lambda: s.sampling_from_logits(
            s.top_k_mask_logits(x, k), generator=g
        ),
    }[case]()


DIRECT = dict(SAMPLERS, logits_sample=[Sample()], logits_topk_sample=[TopK(), Sample()])


@pytest.mark.parametrize("case", sorted(DIRECT))
@pytest.mark.parametrize("batch, vocab", list(zip(BATCHES, VOCABS)))
@pytest.mark.parametrize("per_row", [False, True])
def test_same_tokens_as_direct_call(case, batch, vocab, per_row):
    input_type = L if case.startswith("logits") else None
    pipe = LogitsPipe(DIRECT[case], input_type=input_type)
    x = _logits(batch, vocab, seed=batch, scale=2.0)
    k, p, m, t = 20, 0.9, 0.05, 0.8
    if per_row:
        k = torch.randint(1, 50, (batch,), device="cuda", dtype=torch.int32)
        p = torch.rand(batch, device="cuda") * 0.5 + 0.5
        m = torch.rand(batch, device="cuda") * 0.2 + 0.01
        t = torch.rand(batch, device="cuda") + 0.3
    for seed in range(3):
        g = _gen(seed)
        g_direct = _clone(g)
        tokens = pipe(x, generator=g, temperature=t, top_k=k, top_p=p, min_p=m)
        expected = _direct(case, x, g_direct, k, p, m, t)
        assert torch.equal(tokens, expected), (case, seed)
        assert torch.equal(g.get_state(), g_direct.get_state())


def test_same_tokens_from_the_default_generator():
    x = _logits(16, 32000, seed=1, scale=2.0)
    pipe = LogitsPipe([Temperature(), Softmax(), TopK(), Sample()])
    torch.cuda.manual_seed(123)
    tokens = pipe(x, temperature=0.9, top_k=40)
    torch.cuda.manual_seed(123)
    expected = sampling.top_k_sampling_from_probs(sampling.softmax(x, temperature=0.9), 40)
    assert torch.equal(tokens, expected)


# --- CUDA graphs ---------------------------------------------------------------------------------


def _capture(fn):
    """Warms ``fn`` up on a side stream, then captures it; returns (graph, static output)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.parametrize(
    "processors",
    [
        [Temperature(), Softmax(), TopK(), TopP()],
        [Temperature(), Softmax(), MinP()],
        [Temperature(), Softmax()],
    ],
    ids=["topk_topp", "minp", "softmax"],
)
def test_filter_pipe_in_cuda_graph(processors):
    batch, vocab = 99, 32000
    pipe = LogitsPipe(processors)
    x = _logits(batch, vocab, seed=0)
    t = torch.full((batch,), 0.7, device="cuda")
    k = torch.full((batch,), 50, device="cuda", dtype=torch.int32)
    p = torch.full((batch,), 0.9, device="cuda")
    m = torch.full((batch,), 0.1, device="cuda")

    def run():
        return pipe(x, temperature=t, top_k=k, top_p=p, min_p=m)

    graph, out = _capture(run)
    for trial in range(3):
        x.copy_(_logits(batch, vocab, seed=trial + 1, scale=1.0 + trial))
        t.copy_(torch.rand(batch, device="cuda") + 0.2)
        k.copy_(torch.randint(1, 200, (batch,), device="cuda", dtype=torch.int32))
        p.copy_(torch.rand(batch, device="cuda") * 0.7 + 0.3)
        m.copy_(torch.rand(batch, device="cuda") * 0.3 + 0.01)
        graph.replay()
        torch.testing.assert_close(out, run(), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "processors, input_type",
    [
        ([Temperature(), Softmax(), TopK(), Sample()], None),
        ([Temperature(), Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()], None),
        ([Softmax(), MinP(), Sample()], None),
        ([TopK(), Sample()], L),
    ],
    ids=["topk", "joint", "minp", "logits_topk"],
)
def test_sampling_pipe_in_cuda_graph(processors, input_type):
    batch, vocab = 99, 32000
    pipe = LogitsPipe(processors, input_type=input_type)
    x = _logits(batch, vocab, seed=0, scale=2.0)
    t = torch.full((batch,), 0.7, device="cuda")
    k = torch.full((batch,), 50, device="cuda", dtype=torch.int32)
    p = torch.full((batch,), 0.9, device="cuda")
    m = torch.full((batch,), 0.1, device="cuda")
    seed = torch.tensor([1], device="cuda", dtype=torch.int64)
    offset = torch.tensor([0], device="cuda", dtype=torch.int64)

    def run():
        return pipe(x, temperature=t, top_k=k, top_p=p, min_p=m, seed=seed, offset=offset)

    graph, out = _capture(run)
    for trial in range(3):
        x.copy_(_logits(batch, vocab, seed=trial + 1, scale=2.0))
        t.copy_(torch.rand(batch, device="cuda") + 0.3)
        k.copy_(torch.randint(1, 100, (batch,), device="cuda", dtype=torch.int32))
        seed.fill_(100 + trial)
        offset.fill_(4 * trial)
        graph.replay()
        assert torch.equal(out, run()), trial
    # New parameters take effect: with k = 1 every row draws its argmax.
    k.fill_(1)
    m.fill_(1.0)
    graph.replay()
    assert torch.equal(out.long(), x.argmax(-1))
