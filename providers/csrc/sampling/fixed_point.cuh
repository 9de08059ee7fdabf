// Fixed-point probability masses shared by the threshold searches (radix_threshold.cuh) and
// the draw (inverse_cdf.cuh). A probability's key is its float32 bit pattern; its mass is its
// 24-bit mantissa shifted by (its exponent + a per-row base), so that the row's largest
// probability has a mass of bit length S = 63 - bitlength(V) and the row total stays below
// 2^63. Shifts of mantissas are exact down to S - 24 binades below the largest probability;
// below that they are floored (per element in the draw, per level-0 bin in the searches,
// where each bin holds one exponent).
#pragma once

#include <cstdint>

namespace aotinfer::sampling {

// S for a row of n elements: the bit length of the largest mass, so n masses sum below 2^63.
__device__ __forceinline__ int mass_bits(std::int64_t n) {
  return 63 - (64 - __clzll(static_cast<long long>(n > 0 ? n : 1)));
}

// The fixed-point unit of one row: q(key) = mantissa shifted by (biased exponent + base).
struct FixedPointScale {
  int base;
#ifdef AOTINFER_LAB_SCALED_MASS
  // Lab (dev/NOTES.md item 58): q of every key as two float multiplies by powers of two and
  // one truncating conversion, with no per-element range tests or branches. 2^half and
  // 2^(base + 150 - half), half = (base + 150) / 2: both of one sign and within float's normal
  // range, since -97 <= base + 150 <= 211 for rows of at most 2^31 - 1 elements.
  float half_scale, rest_scale;

  __device__ __forceinline__ static FixedPointScale from_base(int base) {
    const int total = base + 150, half = total / 2;
    return FixedPointScale{base, __uint_as_float(static_cast<std::uint32_t>(half + 127) << 23),
                           __uint_as_float(static_cast<std::uint32_t>(total - half + 127) << 23)};
  }
#else
  __device__ __forceinline__ static FixedPointScale from_base(int base) { return FixedPointScale{base}; }
#endif

  __device__ __forceinline__ static std::uint32_t mantissa(std::uint32_t key) {
    const std::uint32_t frac = key & 0x7FFFFFu;
    return (key >> 23) ? (frac | 0x800000u) : frac;  // subnormals: no implicit bit
  }
  __device__ __forceinline__ static int biased_exponent(std::uint32_t key) {
    const int e = static_cast<int>(key >> 23);
    return e > 0 ? e : 1;  // subnormals scale like exponent 1
  }

  // max_key: the key (bit pattern) of the row's largest kept probability; n: the row length.
  __device__ __forceinline__ static FixedPointScale of(std::uint32_t max_key, std::int64_t n) {
    const std::uint32_t m = mantissa(max_key);
    const int len = m ? 32 - __clz(static_cast<int>(m)) : 0;
    return from_base(mass_bits(n) - len - biased_exponent(max_key));
  }

  // q of a participating key (a kept key never exceeds max_key, so the shift is <= S - len).
  // For a normal key, q is the probability times 2^(150 + base): adding 150 + base to its
  // exponent field and converting to an integer with truncation gives m << shift exactly, or
  // the floor of m / 2^-shift (0 once the product is below 1, as for the shift): the same
  // integer in fewer instructions than the variable 64-bit shift, on the passes that sum
  // masses per element (the draw, the gather pass). A/B at 128 rows: plain sampling
  // 0.90-0.93x, min-p flat 0.94x, top-p flat 0.97x; min-p peaked 1.03-1.05x slower, not
  // explained (results/history/sampling-35e25a1-float-mass.md).
  __device__ __forceinline__ std::uint64_t mass(std::uint32_t key) const {
#ifdef AOTINFER_LAB_SCALED_MASS
    // p * 2^(base + 150) exactly whenever it is at least 2^-126: scaling by a power of two
    // loses no bits while the result is normal, and with scales of one sign the first product
    // lies between p (exact even for a subnormal p scaled up) and the second. Below 2^-126
    // (a product that may have rounded) the truncation gives 0, as the branches below do.
    return __float2ull_rz(__fmul_rn(__fmul_rn(__uint_as_float(key), half_scale), rest_scale));
#else
    const std::uint32_t field = key >> 23;
    if (field - 1u < 254u) {  // 1 <= field <= 254
      if (static_cast<int>(field) + base + 150 <= 0) return 0;  // the product is below 2^-126
      return __float2ull_rz(__uint_as_float(key + (static_cast<std::uint32_t>(base + 150) << 23)));
    }
    const int shift = biased_exponent(key) + base;
    const std::uint64_t m = mantissa(key);
    return shift >= 0 ? m << shift : (shift > -32 ? m >> -shift : 0);
#endif
  }
};

// The searches' unit from the largest key's exponent field alone (level 0 of a search sees
// only its bin): the draw's unit for a normal largest key; for a subnormal one the shift of a
// 24-bit mantissa, which keeps every mass below 2^S as well.
__device__ __forceinline__ int search_mass_base(std::uint32_t top_exponent_field, std::int64_t n) {
  return mass_bits(n) - 24 - static_cast<int>(top_exponent_field > 0 ? top_exponent_field : 1);
}

// sum << shift, or the floor of sum / 2^-shift.
__device__ __forceinline__ std::uint64_t shifted_mass(std::uint64_t sum, int shift) {
  return shift >= 0 ? sum << shift : (shift > -64 ? sum >> -shift : 0);
}

// The top-p search's goal max(1, ceil(p * base)), exact for 0 <= p < 1 (p's 24-bit mantissa
// times a base below 2^63 needs at most 87 bits).
__device__ __forceinline__ std::uint64_t mass_goal(float p, std::uint64_t base) {
  if (!(p > 0.f)) return 1;
  const std::uint32_t bits = __float_as_uint(p);
  const int e = static_cast<int>(bits >> 23);
  const std::uint64_t m = e ? (bits & 0x7FFFFFu) | 0x800000u : bits & 0x7FFFFFu;
  const int s = 150 - (e > 0 ? e : 1);  // p = m * 2^-s, s >= 24 for p < 1
  const std::uint64_t lo = m * base, hi = __umul64hi(m, base);
  std::uint64_t q;
  bool rest;
  if (s >= 128) {
    q = 0;
    rest = (lo | hi) != 0;
  } else if (s >= 64) {
    q = hi >> (s - 64);
    rest = lo != 0 || (hi & ((std::uint64_t{1} << (s - 64)) - 1)) != 0;
  } else {
    q = (lo >> s) | (hi << (64 - s));
    rest = (lo & ((std::uint64_t{1} << s) - 1)) != 0;
  }
  q += rest ? 1 : 0;
  return q < 1 ? 1 : q;
}

}  // namespace aotinfer::sampling
