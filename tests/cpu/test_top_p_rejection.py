"""Top-p sampling by rejection (reference.sampling.top_p_rejection): its rounds against a
scalar implementation written here from the docstring, its kept set against the threshold
search's, its first round against the plain draw, and its frequencies against the
renormalised top-p distribution."""

from __future__ import annotations

import itertools
import math
import re
import struct
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import aotinfer
from aotinfer.reference import philox
from aotinfer.reference import sampling as ref


def _bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scalar_masses(vals: list) -> list:
    """rejection_mass's docstring in exact fractions: the fixed unit floor(w * 2^(S - 1)) for
    a row whose largest lies in [2^-(S - 25), 2), filtered or not, else the unit of the row's
    own largest m, floor(w * 2^(S - e)) with 2^(e - 1) <= m < 2^e (m normal)."""
    s = 63 - max(len(vals), 1).bit_length()
    m = max(vals)
    if Fraction(2) ** -(s - 25) <= Fraction(m) < 2:
        scale = Fraction(2) ** (s - 1)
    else:
        e = math.frexp(m)[1]  # m = f * 2^e, 0.5 <= f < 1
        scale = Fraction(2) ** (s - e)
    return [math.floor(Fraction(v) * scale) for v in vals]


def scalar_rejection(row: torch.Tensor, top_p: float, words: list) -> tuple:
    """One row, in Python integers and floats, straight from the docstrings; returns (token,
    rounds)."""
    w = ref.clean_probs(row.reshape(1, -1))
    vals = w[0].tolist()
    q = scalar_masses(vals)
    keys = [_bits(v) for v in vals]
    total = sum(q)
    if total == 0:
        return 0, 0
    goal = ref.mass_goal(top_p, total) if top_p < 1 else total
    low, high = 0, max(vals)
    for r in range(64):
        big = ((words[2 * r] << 32) | words[2 * r + 1]) & philox.MASK64
        masses = [qi if k > low else 0 for qi, k in zip(q, keys)]
        target = (big * sum(masses)) >> 64
        i = next(j for j, run in enumerate(itertools.accumulate(masses)) if run > target)
        v1 = _f32(_f32(vals[i] + high) * 0.5)
        above0 = sum(qi for qi, k in zip(q, keys) if k > keys[i])
        above1 = sum(qi for qi, k in zip(q, keys) if k > _bits(v1))
        if above0 < goal:
            return i, r + 1
        if above1 < goal:
            low, high = keys[i], v1
        else:
            low = _bits(v1)
    raise AssertionError("no acceptance in 64 rounds")


def _words(seed: int, rows: int, count: int) -> torch.Tensor:
    s = torch.full((rows,), seed, dtype=torch.int64)
    return philox.random_words(
        s, torch.zeros(rows, dtype=torch.int64), torch.arange(rows), 0, count
    )


def _rows(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Rows of mixed shapes: flat, peaked (a few large entries), and with zeros and ties."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, vocab, generator=g) ** 4
    probs[0::3, : vocab // 8] *= 40  # peaked rows
    probs[1::3] = torch.rand(rows, vocab, generator=g)[1::3] + 0.5  # flat rows
    probs[2::3, ::5] = 0
    probs[2::3, 1::7] = probs[2::3, 3:4]  # ties
    return probs / probs.sum(dim=1, keepdim=True)


def test_rounds_match_a_scalar_implementation():
    rows, vocab = 24, 97
    probs = _rows(rows, vocab, seed=1)
    p = torch.tensor([0.9, 0.5, 0.2, 0.05, 0.97, 0.7] * 4, dtype=torch.float32)
    words = _words(31, rows, 128)
    tokens, valid = ref.top_p_rejection(ref.clean_probs(probs), p, lambda n: words[:, : 2 * n])
    assert valid.all()
    rounds = []
    for r in range(rows):
        want, taken = scalar_rejection(probs[r], float(p[r]), words[r].tolist())
        assert int(tokens[r]) == want, f"row {r}"
        rounds.append(taken)
    assert max(rounds) >= 2, "the rows should include a second round"


def test_rows_outside_the_fixed_unit_take_their_own():
    """Unnormalised rows (largest >= 2), nearly empty ones (largest below 2^-(S - 25)) and
    the range's two ends, against the scalar implementation; the masses against Fractions."""
    vocab = 97
    s = 63 - vocab.bit_length()
    probs = _rows(8, vocab, seed=15)
    largest = probs.max(dim=1, keepdim=True).values
    ends = [3.0, 2.0, 2 ** -(s - 25), 2 ** -(s - 25) * (1 - 2**-24), 2**-60, _f32(2 - 2**-23)]
    for r, top in enumerate(ends):
        probs[r] = probs[r] / largest[r] * top
    p = torch.tensor([0.6, 0.3, 0.8, 0.5, 0.7, 0.9, 0.4, 1.0], dtype=torch.float32)
    words = _words(41, 8, 128)
    w = ref.clean_probs(probs)
    tokens, valid = ref.top_p_rejection(w, p, lambda n: words[:, : 2 * n])
    masses = ref.rejection_mass(w)
    assert valid.all()
    for r in range(8):
        assert masses[r].tolist() == scalar_masses(w[r].tolist()), f"row {r}"
        assert int(tokens[r]) == scalar_rejection(probs[r], float(p[r]), words[r].tolist())[0]
    # The range's ends: rows 2 and 5 take the fixed unit, rows 0, 1, 3 and 4 their own.
    fixed = [int(masses[r].max()) == math.floor(Fraction(ends[r]) * 2 ** (s - 1)) for r in range(6)]
    own_top = [int(masses[r].max()).bit_length() == s for r in range(6)]
    assert fixed == [False, False, True, False, False, True]
    assert own_top[:2] == [True, True] and own_top[3:5] == [True, True]


def test_accepted_tokens_are_in_the_top_p_set():
    rows, vocab = 60, 200
    probs = _rows(rows, vocab, seed=2)
    p = torch.rand(rows, generator=torch.Generator().manual_seed(3)).to(torch.float32)
    kw = dict(seed=9, offset=4)
    tokens, valid = ref.sample_from_probs(probs, None, 2, 0, p, **kw, top_p_draw="rejection")
    assert valid.all()
    kept = ref.kept_mask(probs, 2, 0, p)
    assert kept.gather(1, tokens.unsqueeze(1)).all()


def test_no_filter_rows_draw_the_plain_token():
    """top_p >= 1 or NaN: the goal is the total, so round 0 (the plain draw's word) accepts."""
    probs = _rows(9, 50, seed=4)
    p = torch.tensor([1.0, float("nan"), 1.5] * 3)
    kw = dict(seed=17, offset=0)
    got = ref.sample_from_probs(probs, None, 2, 0, p, **kw, top_p_draw="rejection")
    want = ref.sample_from_probs(probs, None, 0, **kw)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_degenerate_rows_and_indices():
    probs = _rows(4, 30, seed=5)
    probs[1] = 0
    probs[2] = float("nan")
    idx = torch.tensor([0, 1, 2, 3, 3, 7, -1])
    tokens, valid = ref.sample_from_probs(
        probs, idx, 2, 0, 0.5, seed=1, offset=2, top_p_draw="rejection"
    )
    assert valid.tolist() == [True, False, False, True, True, False, False]
    assert tokens[~valid].eq(0).all()


def test_top_p_at_or_below_zero_keeps_the_largest():
    probs = _rows(6, 40, seed=6)
    tokens, _ = ref.sample_from_probs(
        probs, None, 2, 0, 0.0, seed=3, offset=0, top_p_draw="rejection"
    )
    largest = probs.max(dim=1).values  # (ties at the largest: any of them)
    assert torch.equal(probs.gather(1, tokens.unsqueeze(1)).squeeze(1), largest)


def test_frequencies_follow_the_renormalised_top_p_distribution():
    vocab, n = 24, 12000
    g = torch.Generator().manual_seed(8)
    row = torch.rand(vocab, generator=g) + 0.2
    row /= row.sum()
    kept = ref.kept_mask(row.reshape(1, -1), 2, 0, 0.6)[0]
    expected = torch.where(kept, row.double(), 0)
    expected /= expected.sum()
    tokens, _ = ref.sample_from_probs(
        row.reshape(1, -1), torch.zeros(n, dtype=torch.int64), 2, 0, 0.6, seed=5, offset=0,
        top_p_draw="rejection",
    )  # fmt: skip
    counts = torch.bincount(tokens, minlength=vocab).double()
    assert counts[~kept].sum() == 0
    e = expected[kept] * n
    stat = float(((counts[kept] - e) ** 2 / e).sum())
    df = int(kept.sum()) - 1
    assert stat < df + 7 * math.sqrt(2 * df) + 10, stat


def test_the_kernels_draw_by_rejection_unless_pinned():
    """The launcher's rule (the contract): rejection unless AOTINFER_SAMPLING_TOP_P=threshold,
    at every shape (no batch or vocabulary bound left in it)."""
    source = (
        Path(__file__).resolve().parents[2] / "providers/csrc/sampling/sample_launch.cu"
    ).read_text()
    rule = re.search(r"bool top_p_draws_by_rejection\(\) \{\n(.*?)\n\}", source, re.S)
    assert rule and '!= "threshold"' in rule.group(1)
    assert "kTopPRejectionMaxBatch" not in source


def test_auto_draws_by_rejection_at_every_shape():
    """top_p_draw="auto" (the default) is rejection at batches and vocabularies on both sides
    of the bounds that chose the threshold before session 41 (64 rows, 65536)."""
    rows, kw = 3, dict(seed=4, offset=0)
    for vocab, batch in ((64, 64), (64, 65), (65536, 64), (65536, 65), (65537, 130)):
        probs = _rows(rows, vocab, seed=12)
        idx = torch.arange(batch) % rows
        got = ref.sample_from_probs(probs, idx, 2, 0, 0.6, **kw)
        want = ref.sample_from_probs(probs, idx, 2, 0, 0.6, **kw, top_p_draw="rejection")
        assert torch.equal(got[0], want[0])


def test_the_public_function_follows_the_switch(monkeypatch):
    probs = _rows(4, 64, seed=13)
    kw = dict(seed=6, offset=2)
    for draw in ("rejection", "threshold"):
        monkeypatch.setenv("AOTINFER_SAMPLING_TOP_P", draw)
        got = aotinfer.top_p_sampling_from_probs(probs, 0.5, **kw)
        want = ref.sample_from_probs(probs, None, 2, 0, 0.5, **kw, top_p_draw=draw)[0]
        assert torch.equal(got.long(), want)
    monkeypatch.setenv("AOTINFER_SAMPLING_TOP_P", "bogus")
    with pytest.raises(ValueError, match="AOTINFER_SAMPLING_TOP_P"):
        aotinfer.top_p_sampling_from_probs(probs, 0.5, **kw)
    # Other samplers never read it (nor does the provider).
    aotinfer.min_p_sampling_from_probs(probs, 0.1, **kw)
    aotinfer.top_k_sampling_from_probs(probs, 5, **kw)
    with pytest.raises(ValueError, match="top_p_draw"):
        ref.sample_from_probs(probs, None, 2, 0, 0.5, **kw, top_p_draw="bogus")


def test_the_goal_is_exact():
    """mass_goal against Fraction arithmetic, p = 1 included (the kernels map NaN and p > 1 to
    1, whose goal is the total)."""
    g = torch.Generator().manual_seed(14)
    totals = [1, 2**62 + 12345, 7 * 2**40 + 3] + torch.randint(
        1, 2**62, (20,), generator=g
    ).tolist()
    ps = [1.0, 0.9, 2**-30, 0.5, 0.0, -1.0] + torch.rand(20, generator=g).tolist()
    for t in totals:
        for p in ps:
            p32 = _f32(p)
            want = max(1, math.ceil(Fraction(p32) * t)) if p32 > 0 else 1
            assert ref.mass_goal(p32, t) == want
    assert ref.mass_goal(1.0, 2**62 + 5) == 2**62 + 5
