"""FixedPointScale::mass (providers/csrc/sampling/fixed_point.cuh) computes a key's fixed-point
mass floor(p * 2^(base + 150)) as two float32 multiplies by powers of two and a truncating
conversion, instead of shifting the key's mantissa. Its comment argues the two agree for every
finite positive key and every base a row can have; this repeats the kernel's float32 steps with
torch on the CPU (round to nearest, subnormals kept, as nvcc compiles them without fast math)
and checks them against the mantissa shifts, including subnormal keys, tiny and huge largest
keys and rows of one element (the widest base)."""

from __future__ import annotations

import torch


def power_of_two(e: int) -> torch.Tensor:
    """2^e as the float32 whose exponent field is e + 127 (normal e only)."""
    return torch.tensor([(e + 127) << 23], dtype=torch.int32).view(torch.float32)


def device_scales(base: int):
    """from_base(base): 2^half and 2^(base + 150 - half), half = (base + 150) / 2 in C."""
    total = base + 150
    half = int(total / 2)  # C's division truncates toward zero
    return power_of_two(half), power_of_two(total - half)


def device_mass(keys: torch.Tensor, base: int) -> torch.Tensor:
    half_scale, rest_scale = device_scales(base)
    product = (keys.view(torch.float32) * half_scale) * rest_scale  # two float32 roundings
    return product.to(torch.float64).floor().to(torch.int64)  # exact: float32 in a double


def shifted_mass(keys: torch.Tensor, base: int) -> torch.Tensor:
    """The mantissa shifted by (biased exponent, subnormals 1) + base, floored."""
    bits = keys.to(torch.int64)
    field = bits >> 23
    mant = torch.where(field > 0, (bits & 0x7FFFFF) | 0x800000, bits & 0x7FFFFF)
    shift = field.clamp(min=1) + base
    up = mant << shift.clamp(min=0, max=62)
    return torch.where(shift >= 0, up, mant >> (-shift).clamp(max=63))


def row_base(max_key: int, vocab: int, search: bool) -> int:
    """FixedPointScale::of(max_key, vocab).base, or search_mass_base (the renorm's unit)."""
    s = 63 - vocab.bit_length()
    field = max_key >> 23
    mant = (max_key & 0x7FFFFF) | (0x800000 if field else 0)
    return s - (24 if search else mant.bit_length()) - max(field, 1)


def keys_up_to(max_key: int, gen: torch.Generator, n: int) -> torch.Tensor:
    """Keys a row with this largest key can hold: uniform bit patterns, subnormals, the top."""

    def draw(low, high, count):
        return torch.randint(low, high, (count,), generator=gen, dtype=torch.int64)

    spread = draw(1, max_key + 1, n)
    subnormal = draw(1, min(max_key, 0x7FFFFF) + 1, n // 4)
    near_top = (max_key - draw(0, 1000, n // 4)).clamp(min=1)
    return torch.cat([spread, subnormal, near_top, torch.tensor([1, max_key])]).to(torch.int32)


def test_two_multiplies_give_the_shifted_mantissa_for_every_kind_of_row():
    gen = torch.Generator().manual_seed(58)
    # 1.0, just below it, 2^-17 (a flat row of 128256), the smallest subnormal, the largest
    # subnormal, the smallest normal, ~2^-75 (base + 150 > 127: the two scales needed) and
    # the largest finite float (an unnormalised row), then random ones.
    max_keys = [0x3F800000, 0x3F7FFFFF, 0x37000000, 0x1, 0x7FFFFF, 0x800000, 0x1A000000, 0x7F7FFFFF]
    max_keys += torch.randint(1, 0x7F800000, (40,), generator=gen).tolist()
    checked = 0
    for max_key in max_keys:
        for vocab in (1, 111, 128256, 2**31 - 1):
            for search in (False, True):
                base = row_base(max_key, vocab, search)
                assert -97 <= base + 150 <= 211  # the range fixed_point.cuh relies on
                keys = keys_up_to(max_key, gen, 2000)
                got, want = device_mass(keys, base), shifted_mass(keys, base)
                bad = (got != want).nonzero()
                if bad.numel():
                    i = int(bad[0, 0])
                    raise AssertionError(
                        f"max_key {max_key:#x} vocab {vocab} base {base}: key {int(keys[i]):#x}"
                        f" gives {int(got[i])}, the shift {int(want[i])}"
                    )
                checked += keys.numel()
    assert checked > 300_000
