"""The binned test of top-p by rejection (RejectionBins, its chunk tables and bin_bounds_above
in providers/csrc/sampling/top_p_rejection.cuh) decides a round from bounds on the masses above
its two pivots, and reads the row only where the bounds leave the answer open: the tokens
equal the exact test's only if the bounds hold. This repeats the kernel's integer steps in
Python (bins of key >> 20: a count and a sum of fractions shifted right by
max(0, bitlength(n) - 9); each bin's bounds in the draw's fixed-point unit) and checks, on
rows of the reference's rejection masses, that every bin's exact mass and the exact mass
above any key lie within them: flat and peaked rows, subnormal entries, rows outside the fixed
unit (largest above 2, or tiny), rows long enough that the fractions are truncated, and one bin
holding a whole row (the 32-bit sums' headroom). The kernel sums the bounds above a key from a
table of chunk sums and the bins of the key's own chunk; that regrouping must give the very
integers of a sum over every bin above the key, at every position within a chunk."""

from __future__ import annotations

import torch

from aotinfer.reference import sampling as ref

SHIFT = 20  # RejectionBins::kShift
BINS = 1 << (31 - SHIFT)


def fraction_shift(n: int) -> int:
    bits = max(n, 1).bit_length()
    return bits - 9 if bits > 9 else 0


def shifted_mass(total: int, shift: int) -> int:
    """fixed_point.cuh's shifted_mass for shift < 0."""
    return total >> -shift if shift > -64 else 0


def unit_base(row: torch.Tensor) -> int:
    """FixedPointScale::base of the row's rejection unit (rejection_mass's choice of key)."""
    n = row.numel()
    s = ref._mass_bits(n)
    own = int(ref._weight_keys(row.view(1, -1)).max())
    fixed = (152 - s) << 23 <= own <= ref.REJECTION_UNIT_KEY
    key = ref.REJECTION_UNIT_KEY if fixed else own
    field = key >> 23
    mant = (key & 0x7FFFFF) | (0x800000 if field else 0)
    return s - mant.bit_length() - max(field, 1)


def bins_of(keys: list, n: int):
    """count[b] and fraction[b] as the kernel's pass adds them (participants only)."""
    fsh = fraction_shift(n)
    count, fraction = [0] * BINS, [0] * BINS
    for k in keys:
        if k:
            count[k >> SHIFT] += 1
            fraction[k >> SHIFT] += (k & 0x7FFFFF) >> fsh
    assert max(fraction) < 2**32 and max(count) < 2**32
    return count, fraction, fsh


def bin_bounds(b: int, count: list, fraction: list, fsh: int, base: int):
    """RejectionBins::bounds."""
    c = count[b]
    if c == 0:
        return 0, 0
    field = b >> (23 - SHIFT)
    implicit = c << 23 if field > 0 else 0
    m_lo = (fraction[b] << fsh) + implicit
    m_hi = m_lo + c * ((1 << fsh) - 1)
    s = max(field, 1) + base
    if s >= 0:
        return m_lo << s, m_hi << s
    f = shifted_mass(m_lo, s)
    return (f - c if f > c else 0), shifted_mass(m_hi, s)


def bounds_above(key: int, own: int, count, fraction, fsh, base):
    """bin_bounds_above for one key: (lo, hi) on the mass of the keys above it."""
    kb = key >> SHIFT
    lo = hi = 0
    for b in range(kb, BINS):
        b_lo, b_hi = bin_bounds(b, count, fraction, fsh, base)
        if b > kb:
            lo, hi = lo + b_lo, hi + b_hi
        else:
            hi += b_hi - own
    return lo, hi


# RejectionBins::kChunkBins: 4 where ptxas takes more than 48 KB of static shared memory
# (sm_90a, sm_100a, sm_110a), 8 elsewhere. The width changes no bound; both are checked.
CHUNK_WIDTHS = (4, 8)


def chunk_tables(count, fraction, fsh, base, chunk):
    """RejectionBins::build_tables: (lo, hi)[c] = the bounds of every bin from chunk c up."""
    chunks = BINS // chunk
    lo, hi = [0] * (chunks + 1), [0] * (chunks + 1)
    for c in reversed(range(chunks)):
        pairs = [bin_bounds(c * chunk + j, count, fraction, fsh, base) for j in range(chunk)]
        lo[c] = lo[c + 1] + sum(p[0] for p in pairs)
        hi[c] = hi[c + 1] + sum(p[1] for p in pairs)
    return lo, hi


def bounds_above_from_tables(key: int, own: int, tables, count, fraction, fsh, base, chunk):
    """bin_bounds_above: one lane per bin of the key's chunk, plus the table entry above it."""
    kb = key >> SHIFT
    lo, hi = tables[0][kb // chunk + 1], tables[1][kb // chunk + 1]
    for lane in range(chunk):
        b = kb - kb % chunk + lane
        b_lo, b_hi = bin_bounds(b, count, fraction, fsh, base)
        if b > kb:
            lo, hi = lo + b_lo, hi + b_hi
        elif b == kb:
            hi += b_hi - own
    return lo, hi


def check_row(row: torch.Tensor, pivots: int = 40, seed: int = 0):
    n = row.numel()
    w = ref.clean_probs(row.view(1, -1))
    q = ref.rejection_mass(w)[0].tolist()
    keys = ref._weight_keys(w)[0].tolist()
    count, fraction, fsh = bins_of(keys, n)
    base = unit_base(w[0])
    per_bin = {}
    for k, m in zip(keys, q):
        if k:
            per_bin[k >> SHIFT] = per_bin.get(k >> SHIFT, 0) + m
    for b in range(BINS):
        lo, hi = bin_bounds(b, count, fraction, fsh, base)
        assert lo <= per_bin.get(b, 0) <= hi, (b, lo, per_bin.get(b, 0), hi)
    tables = {w: chunk_tables(count, fraction, fsh, base, w) for w in CHUNK_WIDTHS}

    def regrouped(key, own, w):
        return bounds_above_from_tables(key, own, tables[w], count, fraction, fsh, base, w)

    # Keys at the start and the end of every occupied bin and its neighbours (every position
    # of a bin within its chunk): the tables give the sum over every bin, exactly.
    for b in sorted({c + d for c in per_bin for d in (-1, 0, 1) if 0 <= c + d < BINS}):
        for key in (b << SHIFT, (b << SHIFT) | ((1 << SHIFT) - 1)):
            full = bounds_above(key, 0, count, fraction, fsh, base)
            for w in CHUNK_WIDTHS:
                assert regrouped(key, 0, w) == full, (w, key)
    # Pivots: drawn keys (elements, own mass known) and midpoints towards the largest.
    g = torch.Generator().manual_seed(seed)
    present = [i for i, k in enumerate(keys) if k]
    picks = torch.randint(len(present), (pivots,), generator=g).tolist()
    top = max(keys)
    for i in picks:
        k0, own = keys[present[i]], q[present[i]]
        v1 = torch.tensor([k0, top], dtype=torch.int64).to(torch.int32).view(torch.float32)
        k1 = int(((v1[0] + v1[1]) * 0.5).view(torch.int32)) & 0xFFFFFFFF
        for key, own_mass in ((k0, own), (k1, 0)):
            exact = sum(m for k, m in zip(keys, q) if k > key)
            lo, hi = bounds_above(key, own_mass, count, fraction, fsh, base)
            assert lo <= exact <= hi, (key, lo, exact, hi)
            for w in CHUNK_WIDTHS:
                assert regrouped(key, own_mass, w) == (lo, hi), (w, key, lo, hi)


def test_bounds_hold_on_flat_and_peaked_rows():
    g = torch.Generator().manual_seed(1)
    for vocab, scale in ((1000, 0.5), (5000, 4.0), (700, 1.0)):
        row = torch.softmax(torch.randn(vocab, generator=g) * scale, 0)
        check_row(row, seed=vocab)


def test_bounds_hold_with_subnormals_zeros_and_nan():
    g = torch.Generator().manual_seed(2)
    row = torch.softmax(torch.randn(3000, generator=g), 0)
    row[::5] = 1e-40  # subnormal: bins of exponent field 0
    row[1::7] = 0.0
    row[2::11] = float("nan")
    check_row(row, seed=3)


def test_bounds_hold_outside_the_fixed_unit():
    g = torch.Generator().manual_seed(4)
    for top in (3.0, 1e-30):
        row = torch.softmax(torch.randn(2000, generator=g), 0)
        check_row(row / row.max() * top, seed=5)


def test_bounds_hold_when_fractions_are_truncated():
    """Rows of 2^10 and more elements shift the fractions right; 40000 elements: by 7."""
    g = torch.Generator().manual_seed(6)
    row = torch.softmax(torch.randn(40000, generator=g) * 2, 0)
    assert fraction_shift(row.numel()) == 7
    check_row(row, pivots=10, seed=7)


def test_one_bin_holding_a_whole_row_stays_within_32_bits():
    """Every key in one bin with the largest fraction it allows: the count and the fraction
    sum of n < 2^(9 + shift) keys fit their 32-bit words (bins_of asserts it)."""
    n = (1 << 17) - 1
    fraction = torch.tensor([0x3F7FFFFF], dtype=torch.int32).view(torch.float32)  # < 1
    row = fraction.expand(n).clone()
    count, sums, _ = bins_of(ref._weight_keys(row.view(1, -1))[0].tolist(), n)
    assert count[0x3F7FFFFF >> SHIFT] == n and sums[0x3F7FFFFF >> SHIFT] < 2**32
