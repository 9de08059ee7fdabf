"""aotinfer.reference.philox against an independent scalar Philox4x32-10 written here in
plain Python, which is itself checked against Random123's published known-answer vectors.
The GPU tests check the CUDA side (philox.cuh) against the same reference."""

from __future__ import annotations

import struct

import pytest
import torch

from aotinfer.reference import philox

MASK32 = 0xFFFFFFFF


def scalar_philox(ctr, key):
    """Philox4x32-10 on Python ints (Salmon et al., Random123)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (
            (p1 >> 32) ^ c1 ^ k0,
            p1 & MASK32,
            (p0 >> 32) ^ c3 ^ k1,
            p0 & MASK32,
        )
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def _u32(word: int) -> float:
    """float32(word) * 2^-32 + 2^-33 with float32 roundings (the scaling is exact)."""
    w = struct.unpack("f", struct.pack("f", float(word)))[0]  # float64 -> float32: one rounding
    return struct.unpack("f", struct.pack("f", w * 2.0**-32 + 2.0**-33))[0]


def scalar_uniform(seed, offset, row, stream, i):
    """The uniform for element i of output row `row`, in `stream` (philox.cuh's layout)."""
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    key = (seed & MASK32, ((seed >> 32) + stream * 0x9E3779B9) & MASK32)
    ctr = ((i // 4) & MASK32, row, offset & MASK32, offset >> 32)
    word = scalar_philox(ctr, key)[i % 4]
    return _u32(word)


# Random123 kat_vectors, philox4x32_10: (counter, key) -> output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_scalar_philox_matches_random123(ctr, key, expected):
    assert scalar_philox(ctr, key) == expected


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_torch_philox_matches_random123(ctr, key, expected):
    t = [torch.tensor([v], dtype=torch.int64) for v in (*ctr, *key)]
    assert tuple(int(x) for x in philox.philox4x32_10(*t)) == expected


def test_torch_philox_matches_scalar_on_random_counters():
    g = torch.Generator().manual_seed(7)
    vals = torch.randint(0, 2**32, (6, 64), generator=g, dtype=torch.int64)
    out = philox.philox4x32_10(*vals)
    for j in range(0, 64, 7):
        ctr = tuple(int(vals[r, j]) for r in range(4))
        key = (int(vals[4, j]), int(vals[5, j]))
        assert tuple(int(o[j]) for o in out) == scalar_philox(ctr, key)


# (seed, offset, row, stream): high seed bits, offsets past 2^32, large rows and streams.
CASES = [
    (0, 0, 0, 0),
    (42, 0, 3, 0),
    (2**63 + 12345, 7, 1, 1),
    (-1, 2**32 + 5, 988, 2),
    (0x0123456789ABCDEF, 2**64 - 4, 70000, 2 + 1000),
]


@pytest.mark.parametrize("seed,offset,row,stream", CASES)
def test_uniform_layout_matches_scalar_formula(seed, offset, row, stream):
    count = 13  # four groups, the last one partial
    u = philox.uniform(
        philox.row_keys(seed, 1),
        philox.row_keys(offset, 1),
        torch.tensor([row]),
        stream,
        count,
    )
    assert u.dtype == torch.float32 and u.shape == (1, count)
    expected = [scalar_uniform(seed, offset, row, stream, i) for i in range(count)]
    assert u[0].tolist() == expected  # float32(word) * 2^-32 + 2^-33, rounded as float32


def test_known_vectors_of_the_stream_layout():
    """A few uniforms written out, computed once with scalar_uniform (and checked by it)."""
    for seed, offset, row, stream, i in [(0, 0, 0, 0, 0), (1, 4, 2, 0, 5), (2**40, 8, 1, 3, 9)]:
        u = philox.uniform(
            philox.row_keys(seed, 1), philox.row_keys(offset, 1), torch.tensor([row]), stream, i + 1
        )
        assert float(u[0, i]) == scalar_uniform(seed, offset, row, stream, i)
    # Element 0 of row 0, stream 0, seed 0, offset 0 is word 0 of the first KAT vector.
    first = philox.uniform(
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64),
        0,
        1,
    )
    assert float(first[0, 0]) == _u32(0x6627E8D5)


def test_rows_seeds_and_streams_vectorise_row_by_row():
    seeds = torch.tensor([1, 2**62, -5, 3], dtype=torch.int64)
    offsets = torch.tensor([0, 4, 2**33, 8], dtype=torch.int64)
    rows = torch.tensor([0, 1, 2, 7])
    streams = torch.tensor([0, 1, 2, 9])
    u = philox.uniform(seeds, offsets, rows, streams, 6)
    for r in range(4):
        expected = [
            scalar_uniform(int(seeds[r]), int(offsets[r]), int(rows[r]), int(streams[r]), i)
            for i in range(6)
        ]
        assert u[r].tolist() == expected


def test_uniform_range_excludes_zero_and_small_exponentials_keep_precision():
    words = torch.tensor([0, 1, 0xFF, 0xFFFFFFFF], dtype=torch.int64)
    u = philox.uniform_from_words(words)
    assert u.tolist() == [2**-33, 3 * 2**-33, 511 * 2**-33, 1.0]
    e = philox.exponential(u)
    # The smallest exponentials are ~u itself, never 0: no token wins a race for free.
    assert e[0] > 0 and abs(float(e[0]) / 2**-33 - 1) < 1e-6
    assert e[-1] == float("inf")


def test_row_keys_accepts_ints_and_64_bit_tensors():
    assert philox.row_keys(2**64 - 1, 3).tolist() == [-1, -1, -1]
    assert philox.row_keys(torch.tensor([5], dtype=torch.int64), 2).tolist() == [5, 5]
    assert philox.row_keys(torch.tensor([1, 2]), 2).tolist() == [1, 2]
    if hasattr(torch, "uint64"):
        u = torch.tensor([-(2**63) + 1], dtype=torch.int64).view(torch.uint64)  # 2^63 + 1
        assert philox.row_keys(u, 1).tolist() == [-(2**63) + 1]
    with pytest.raises(ValueError, match="expected 1 or 3"):
        philox.row_keys(torch.tensor([1, 2]), 3)


def test_to_int64_wraps_mod_2_64():
    assert philox.to_int64(0) == 0
    assert philox.to_int64(2**63) == -(2**63)
    assert philox.to_int64(2**64 + 3) == 3
    assert philox.to_int64(-1) == -1


def test_different_offsets_give_independent_counters():
    # The offset lives in its own counter words: no overlap between offset o and o + 4.
    s = philox.row_keys(9, 1)
    a = philox.uniform(s, philox.row_keys(0, 1), torch.tensor([0]), 0, 64)
    b = philox.uniform(s, philox.row_keys(4, 1), torch.tensor([0]), 0, 64)
    assert not torch.equal(a[:, 4:], b[:, :-4])
    assert (a != b).float().mean() > 0.95
