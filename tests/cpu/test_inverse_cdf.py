"""The fixed-point inverse CDF of aotinfer.reference.sampling (the draw every probability
sampler makes, CPU and GPU alike) against an independent scalar computation written here
with Python floats and integers: the masses, the target and the token."""

from __future__ import annotations

import math

import pytest
import torch

from aotinfer.reference import philox
from aotinfer.reference import sampling as ref


def scalar_masses(row):
    """q_i = floor(w_i * 2^(S - e)), 2^(e-1) <= max < 2^e, S = 63 - bitlength(V)."""
    vals = [float(v) for v in row]
    s = 63 - len(vals).bit_length()
    top = max(vals)
    if top == 0:
        return [0] * len(vals)
    _, e = math.frexp(top)  # top = f * 2^e, f in [0.5, 1)
    return [math.floor(math.ldexp(v, s - e)) for v in vals]  # exact: float32 in a double


def scalar_token(q, r):
    total = sum(q)
    if total == 0:
        return 0, False
    target = (r * total) >> 64
    run = 0
    for i, m in enumerate(q):
        run += m
        if run > target:
            return i, True
    raise AssertionError("unreachable: the target is below the total")


def spread_row(vocab, seed):
    """Weights over many binades, with zeros, ties and subnormals."""
    g = torch.Generator().manual_seed(seed)
    w = torch.exp2(torch.randint(-140, 3, (vocab,), generator=g).float()) * torch.rand(
        vocab, generator=g
    )
    w[torch.rand(vocab, generator=g) < 0.2] = 0
    w[: vocab // 10] = w[vocab // 10]
    return w


@pytest.mark.parametrize("vocab", [1, 7, 111, 4096, 32000])
@pytest.mark.parametrize("seed", [0, 1])
def test_masses_match_the_exact_scaling(vocab, seed):
    w = spread_row(vocab, seed)
    got = ref.fixed_point_mass(w.unsqueeze(0))[0].tolist()
    assert got == scalar_masses(w)


def test_masses_of_subnormal_rows_and_zero_rows():
    tiny = torch.tensor([[1e-45, 3e-45, 0.0, 2.5e-42], [0.0, 0.0, 0.0, 0.0]])
    got = ref.fixed_point_mass(tiny)
    assert got[0].tolist() == scalar_masses(tiny[0])
    assert got[1].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("vocab", [2, 128256, 256000])
def test_the_largest_mass_and_the_total_stay_in_range(vocab):
    s = 63 - vocab.bit_length()
    w = torch.full((1, vocab), 0.75)  # all at the top of the scale: the largest total
    q = ref.fixed_point_mass(w)
    assert 2 ** (s - 1) <= int(q.max()) < 2**s
    assert int(q.sum()) < 2**63


def test_tokens_match_the_scalar_inverse_cdf():
    rows, vocab = 6, 333
    w = torch.stack([spread_row(vocab, 10 + r) for r in range(rows)])
    w[3] = 0  # nothing to draw
    w[4] = 0
    w[4, vocab - 1] = 1e-30  # only the last entry
    seeds = torch.full((rows,), 99, dtype=torch.int64)
    offsets = torch.arange(rows, dtype=torch.int64)
    words = philox.random_words(seeds, offsets, torch.arange(rows), 0, 2)
    token, valid = ref.inverse_cdf(w, words)
    for r in range(rows):
        q = scalar_masses(w[r])
        rr = ((int(words[r, 0]) << 32) | int(words[r, 1])) & philox.MASK64
        want, ok = scalar_token(q, rr)
        assert (int(token[r]), bool(valid[r])) == (want, ok), f"row {r}"
        assert not ok or q[want] > 0
    assert int(token[4]) == vocab - 1


def test_extreme_words_pick_the_first_and_the_last_candidate():
    w = torch.tensor([[0.0, 0.25, 0.5, 0.0, 0.25, 0.0]])
    low = torch.tensor([[0, 0]])
    high = torch.tensor([[0xFFFFFFFF, 0xFFFFFFFF]])
    assert ref.inverse_cdf(w, low)[0].item() == 1
    assert ref.inverse_cdf(w, high)[0].item() == 4


def scalar_fixed_unit_masses(row):
    """The unit of an unfiltered row (reference "Drawing"): floor(w * 2^(S - 1)) when the
    largest lies in [2^-(S - 25), 2), else the row's own (scalar_masses)."""
    vals = [float(v) for v in row]
    s = 63 - len(vals).bit_length()
    if 2.0 ** -(s - 25) <= max(vals) < 2:
        return [math.floor(math.ldexp(v, s - 1)) for v in vals]
    return scalar_masses(row)


def test_unfiltered_rows_take_the_fixed_unit_where_it_holds():
    rows, vocab = 7, 333
    s = 63 - vocab.bit_length()
    w = torch.stack([spread_row(vocab, 30 + r) for r in range(rows)])
    w = w / w.max(dim=1, keepdim=True).values
    # largest 1, 0.25, 2^-(S - 25) (the range's floor), just below it, 2 (above), 3, subnormal
    scale = [1.0, 0.25, 2.0 ** -(s - 25), 2.0 ** -(s - 25) * (1 - 2**-24), 2.0, 3.0, 1e-40]
    w = (w * torch.tensor(scale).unsqueeze(1)).to(torch.float32)
    words = philox.random_words(
        torch.full((rows,), 5, dtype=torch.int64), torch.zeros(rows, dtype=torch.int64),
        torch.arange(rows), 0, 2,
    )  # fmt: skip
    everywhere = torch.ones(rows, dtype=torch.bool)
    keys = ref.draw_unit_keys(w, everywhere).squeeze(1).tolist()
    assert [k == ref.REJECTION_UNIT_KEY for k in keys] == [True] * 3 + [False] * 4
    token, valid = ref.inverse_cdf(w, words, everywhere)
    for r in range(rows):
        q = scalar_fixed_unit_masses(w[r].tolist())
        rr = ((int(words[r, 0]) << 32) | int(words[r, 1])) & philox.MASK64
        assert (int(token[r]), bool(valid[r])) == scalar_token(q, rr), f"row {r}"
    # Filtered rows (unfiltered False) keep their own largest's unit.
    own = ref.inverse_cdf(w, words, torch.zeros(rows, dtype=torch.bool))
    assert torch.equal(own[0], ref.inverse_cdf(w, words)[0])


@pytest.mark.parametrize(
    "mode, top_k, top_p, want",
    [
        (0, 0, 1.0, [True] * 5),
        (1, torch.tensor([0, -1, 5, 99, 100]), 1.0, [True, True, False, False, True]),
        (2, 0, torch.tensor([1.0, float("nan"), 0.5, 1.5, 0.999]),
         [True, True, False, True, False]),
        (3, 0, 1.0, [False] * 5),  # min-p always filters
        (4, torch.tensor([0, 100, 5, 0, 100]), torch.tensor([1.0, 1.0, 1.0, 0.5, 0.5]),
         [True, True, False, False, False]),
        (5, torch.tensor([0, 100, 5, 0, 100]), torch.tensor([1.0, 1.0, 1.0, 0.5, 0.5]),
         [True, True, False, False, False]),
    ],
)  # fmt: skip
def test_unfiltered_rows_follow_the_kernels_use_of_the_parameters(mode, top_k, top_p, want):
    got = ref.unfiltered_rows(mode, top_k, top_p, 5, 100, "cpu")
    assert got.tolist() == want


def test_no_op_filters_draw_the_plain_token():
    """Every filter that filters nothing draws plain sampling's token, for the same words."""
    g = torch.Generator().manual_seed(4)
    probs = torch.rand(12, 500, generator=g) ** 3
    probs = probs / probs.sum(dim=1, keepdim=True)
    kw = dict(seed=21, offset=3)
    plain = ref.sample_from_probs(probs, None, 0, **kw)
    for mode, k, p in [(1, 500, 1.0), (1, 0, 1.0), (1, 10**9, 1.0), (2, 0, 1.0), (4, 600, 1.0),
                       (5, 0, float("nan"))]:  # fmt: skip
        got = ref.sample_from_probs(probs, None, mode, k, p, **kw, top_p_draw="threshold")
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1]), (mode, k, p)
