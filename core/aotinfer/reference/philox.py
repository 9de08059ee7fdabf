"""Philox4x32-10 counters and aotinfer's stream layout, in torch, bit-exact with
``providers/csrc/sampling/philox.cuh`` (the GPU tests compare the two).

The uniform for element ``i`` of output row ``b`` in stream ``s``, given the row's 64-bit
``seed`` and ``offset``::

    key     = (seed_lo32, seed_hi32 + s * 0x9E3779B9 mod 2^32)
    counter = (i // 4, b, offset_lo32, offset_hi32)
    word    = philox4x32_10(counter, key)[i % 4]
    u       = float32(word) * 2^-32 + 2^-33      # float32, in (0, 1]
    E       = -log1p(-u)                         # the Exp(1) variate of the races

Streams: 0 is the token draw of every sampler (words 0 and 1 of group 0 make the 64-bit
uniform of the inverse CDF over probabilities; every element's word is Gumbel noise for
logits); chain speculative sampling uses 1 for its acceptance tests and ``2 + j`` for the
token drawn at position ``j``.

Everything is int64 arithmetic on tensors, masked to 32 bits: 32x32-bit products are
built from 16-bit limbs so no intermediate exceeds 2^50 (signed int64 overflow is never
relied on). 64-bit seeds and offsets travel as int64 tensors holding the unsigned bit
pattern (two's complement), the way the provider reads them.
"""

from __future__ import annotations

from typing import Union

import torch

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
STREAM_STEP = 0x9E3779B9  # added to the key's high word once per stream

IntOrTensor = Union[int, torch.Tensor]


def to_int64(value: int) -> int:
    """The signed int64 holding the unsigned 64-bit pattern of ``value`` (mod 2^64). A value
    already in int64's range is returned as it is, without the mask: the same result, and
    under torch.compile a symbolic int stays free of a 2^64 - 1 constant, which inductor
    cannot write as an int64."""
    if -(1 << 63) <= value < (1 << 63):
        return value
    value &= MASK64
    return value - (1 << 64) if value >= (1 << 63) else value


def _mulhilo(a: int, b: torch.Tensor):
    """(hi32, lo32) of the 64-bit product of the constant ``a`` and ``b`` (values < 2^32)."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    b_hi, b_lo = b >> 16, b & 0xFFFF
    low = a_lo * b_lo
    mid = a_hi * b_lo + a_lo * b_hi  # < 2^33
    high = a_hi * b_hi
    t = low + ((mid & 0xFFFF) << 16)  # < 2^33
    lo = t & MASK32
    hi = (high + (mid >> 16) + (t >> 32)) & MASK32
    return hi, lo


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Ten Philox4x32 rounds on broadcastable int64 tensors of 32-bit values; the key is
    bumped after every round (the bump after the last one is unused). Returns 4 tensors."""
    for _ in range(10):
        hi0, lo0 = _mulhilo(M0, c0)
        hi1, lo1 = _mulhilo(M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + W0) & MASK32
        k1 = (k1 + W1) & MASK32
    return c0, c1, c2, c3


def row_keys(value: IntOrTensor, rows: int, device=None) -> torch.Tensor:
    """A seed or offset as an int64 tensor of length ``rows`` (on ``device``; default: the
    tensor's own, or the CPU for an int): a Python int (any sign, taken mod 2^64) for every
    row, or an int64/uint64 tensor of length 1 (broadcast) or ``rows`` (one per output row)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().reshape(-1)
        if device is not None:
            t = t.to(device)
        if t.dtype != torch.int64:
            t = t.view(torch.int64) if t.element_size() == 8 else t.to(torch.int64)
        if t.numel() == 1:
            return t.expand(rows).clone()
        if t.numel() != rows:
            raise ValueError(f"expected 1 or {rows} seeds/offsets, got {t.numel()}")
        return t.clone()
    return torch.full((rows,), to_int64(int(value)), dtype=torch.int64, device=device)


def random_words(
    seed: torch.Tensor,
    offset: torch.Tensor,
    rows: torch.Tensor,
    stream: IntOrTensor,
    count: int,
) -> torch.Tensor:
    """The 32-bit words (as int64) for elements ``0 .. count-1`` of each row: ``(R, count)``.

    ``seed``, ``offset`` and ``rows`` are int64 tensors of shape ``(R,)`` (``rows`` holds
    the output-row numbers that go into the counter); ``stream`` is an int or an ``(R,)``
    tensor. Computed on the device of ``seed``.
    """
    device = seed.device
    seed = seed.to(torch.int64).reshape(-1, 1)
    offset = offset.to(device=device, dtype=torch.int64).reshape(-1, 1)
    stream_t = torch.as_tensor(stream, dtype=torch.int64, device=device).reshape(-1, 1)
    k0 = seed & MASK32
    _, stream_lo = _mulhilo(STREAM_STEP, stream_t & MASK32)  # s * 0x9E3779B9 mod 2^32
    k1 = (((seed >> 32) & MASK32) + stream_lo) & MASK32
    groups = (count + 3) // 4
    c0 = torch.arange(groups, dtype=torch.int64, device=device).reshape(1, -1) & MASK32
    c1 = rows.to(device=device, dtype=torch.int64).reshape(-1, 1) & MASK32
    c2 = offset & MASK32
    c3 = (offset >> 32) & MASK32
    w = philox4x32_10(c0, c1, c2, c3, k0, k1)
    shape = torch.broadcast_shapes(*(x.shape for x in w))
    words = torch.stack([x.expand(shape) for x in w], dim=-1)  # (R, groups, 4)
    return words.reshape(shape[0], groups * 4)[:, :count]


def uniform_from_words(words: torch.Tensor) -> torch.Tensor:
    """u = float32(word) * 2^-32 + 2^-33 in float32, in (0, 1]: the word rounds to float32
    (nearest even), the scaling is exact and the sum rounds once, as the kernel's fmaf does."""
    return words.to(torch.float32) * (2.0**-32) + (2.0**-33)


def uniform(
    seed: torch.Tensor,
    offset: torch.Tensor,
    rows: torch.Tensor,
    stream: IntOrTensor,
    count: int,
) -> torch.Tensor:
    """Uniforms in (0, 1], float32, ``(R, count)``: see the module docstring."""
    return uniform_from_words(random_words(seed, offset, rows, stream, count))


def exponential(u: torch.Tensor) -> torch.Tensor:
    """E = -log1p(-u) in float32: the Exp(1) variate the samplers race with. Taking it from
    1 - u keeps small E -- the values that decide a race -- at full precision."""
    return -torch.log1p(-u.to(torch.float32))
