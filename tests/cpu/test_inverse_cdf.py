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
