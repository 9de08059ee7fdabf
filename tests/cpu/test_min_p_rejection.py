"""Min-p sampling by rejection (reference.sampling.min_p_rejection): its two rounds against a
scalar implementation written here from the docstrings, in exact fractions, and its
frequencies against the renormalised min-p distribution."""

from __future__ import annotations

import itertools
import math
import struct
from fractions import Fraction

import torch

from aotinfer.reference import philox
from aotinfer.reference import sampling as ref


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scalar_masses(vals: list) -> list:
    """rejection_mass: floor(w * 2^(S - 1)) where the largest lies in [2^-(S - 25), 2), else
    the unit of the row's own largest m, floor(w * 2^(S - e)) with 2^(e - 1) <= m < 2^e."""
    s = 63 - max(len(vals), 1).bit_length()
    m = max(vals)
    if Fraction(2) ** -(s - 25) <= Fraction(m) < 2:
        scale = Fraction(2) ** (s - 1)
    else:
        scale = Fraction(2) ** (s - math.frexp(m)[1])
    return [math.floor(Fraction(v) * scale) for v in vals]


def scalar_draw(masses: list, w0: int, w1: int):
    total = sum(masses)
    if total == 0:
        return None
    target = ((((w0 << 32) | w1) & philox.MASK64) * total) >> 64
    return next(i for i, run in enumerate(itertools.accumulate(masses)) if run > target)


def scalar_min_p(row: list, min_p: float, words: list):
    """(token, rounds) of one row straight from min_p_rejection's docstring."""
    q = scalar_masses(row)
    first = scalar_draw(q, words[0], words[1])
    if first is None:
        return 0, 0
    t = _f32(_f32(min_p) * max(row))  # the float32 product
    if not (math.isfinite(t) and t > 0):
        t = 0.0
    if row[first] >= t:
        return first, 1
    return scalar_draw([m if v >= t else 0 for m, v in zip(q, row)], words[2], words[3]), 2


def _rows(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Peaked rows (a few large entries: round 0 often lands below the threshold), flat
    ones, rows with zeros and ties."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, vocab, generator=g) ** 6
    probs[0::3, : vocab // 10] *= 30
    probs[1::3] = torch.rand(rows, vocab, generator=g)[1::3] + 0.5
    probs[2::3, ::4] = 0
    probs[2::3, 1::5] = probs[2::3, 3:4]
    return probs / probs.sum(dim=1, keepdim=True)


def test_rounds_match_a_scalar_implementation():
    rows, vocab = 30, 113
    probs = _rows(rows, vocab, seed=3)
    probs[5] *= 3.0  # unnormalised (largest >= 2 for this row): its own largest's unit
    min_p = torch.tensor([0.05, 0.3, 0.6, 0.9, 1.0] * 6, dtype=torch.float32)
    words = philox.random_words(
        torch.full((rows,), 23, dtype=torch.int64), torch.zeros(rows, dtype=torch.int64),
        torch.arange(rows), 0, 4,
    )  # fmt: skip
    w = ref.clean_probs(probs)
    tokens, valid = ref.min_p_rejection(w, min_p, words)
    assert valid.all()
    rounds = []
    for r in range(rows):
        want, taken = scalar_min_p(w[r].tolist(), float(min_p[r]), words[r].tolist())
        assert int(tokens[r]) == want, f"row {r}"
        rounds.append(taken)
    assert 1 in rounds and 2 in rounds, "both an accepted and a rejected round 0"


def test_sample_from_probs_draws_min_p_by_rejection():
    probs = _rows(6, 200, seed=4)
    idx = torch.tensor([0, 1, 2, 3, 4, 5, 5, 9, -1])
    got, valid = ref.sample_from_probs(probs, idx, 3, min_p=0.2, seed=7, offset=2)
    assert valid.tolist() == [True] * 7 + [False, False]
    kept = ref.kept_mask(probs, 3, min_p=0.2)
    assert kept[idx[:7], got[:7]].all()
    words = philox.random_words(
        torch.full((7,), 7, dtype=torch.int64), torch.full((7,), 2, dtype=torch.int64),
        torch.arange(7), 0, 4,
    )  # fmt: skip
    for b in range(7):
        row = ref.clean_probs(probs[idx[b]].reshape(1, -1))[0].tolist()
        assert int(got[b]) == scalar_min_p(row, 0.2, words[b].tolist())[0], f"output {b}"


def test_degenerate_rows():
    probs = _rows(4, 50, seed=5)
    probs[1] = 0
    probs[2] = float("nan")
    tokens, valid = ref.sample_from_probs(probs, None, 3, min_p=0.5, seed=1, offset=0)
    assert valid.tolist() == [True, False, False, True]
    assert tokens[~valid].eq(0).all()


def test_min_p_above_one_keeps_nothing():
    """A per-row min_p above 1 (tensors are not checked on the host) keeps no key: invalid."""
    probs = _rows(3, 40, seed=7)
    m = torch.tensor([0.5, 2.0, 1.0])
    tokens, valid = ref.sample_from_probs(probs, None, 3, min_p=m, seed=2, offset=0)
    assert valid.tolist() == [True, False, True] and int(tokens[1]) == 0


def test_min_p_one_keeps_the_largest():
    probs = _rows(9, 60, seed=6)
    tokens, _ = ref.sample_from_probs(probs, None, 3, min_p=1.0, seed=3, offset=0)
    largest = probs.max(dim=1).values
    assert torch.equal(probs.gather(1, tokens.unsqueeze(1)).squeeze(1), largest)


def test_frequencies_follow_the_renormalised_min_p_distribution():
    vocab, n = 30, 12000
    g = torch.Generator().manual_seed(9)
    row = torch.rand(vocab, generator=g) ** 3 + 0.01
    row /= row.sum()
    kept = ref.kept_mask(row.reshape(1, -1), 3, min_p=0.3)[0]
    assert 3 <= int(kept.sum()) < vocab and float(row[~kept].sum()) > 0.1  # rounds 1 happen
    expected = torch.where(kept, row.double(), 0)
    expected /= expected.sum()
    tokens, _ = ref.sample_from_probs(
        row.reshape(1, -1), torch.zeros(n, dtype=torch.int64), 3, min_p=0.3, seed=5, offset=0
    )
    counts = torch.bincount(tokens, minlength=vocab).double()
    assert counts[~kept].sum() == 0
    e = expected[kept] * n
    stat = float(((counts[kept] - e) ** 2 / e).sum())
    df = int(kept.sum()) - 1
    assert stat < df + 7 * math.sqrt(2 * df) + 10, stat
