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
  // mass() as two float multiplies by powers of two and one truncating conversion, with no
  // per-element range tests or branches: 2^half and 2^(base + 150 - half), half =
  // (base + 150) / 2, both of one sign and within float's normal range, since
  // -97 <= base + 150 <= 211 for rows of at most 2^31 - 1 elements.
  float half_scale, rest_scale;

  __device__ __forceinline__ static FixedPointScale from_base(int base) {
    const int total = base + 150, half = total / 2;
    return FixedPointScale{base, __uint_as_float(static_cast<std::uint32_t>(half + 127) << 23),
                           __uint_as_float(static_cast<std::uint32_t>(total - half + 127) << 23)};
  }

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

  // Top-p by rejection's unit for a filtered row (top_p_rejection.cuh): that of a largest key
  // just below 2 (q = floor(p * 2^(S - 1))), fixed, so that round 0 sums its masses in the
  // pass that finds the row's largest key instead of after it. It holds for rows whose largest
  // key lies in [2^-(S - 25), 2): every mass stays below 2^S, and the largest's, at least
  // 2^24, keeps every bit of its mantissa. Other rows (unnormalised ones, or nearly empty)
  // take the unit of their own largest key (of()).
  static constexpr std::uint32_t kRejectionUnitKey = 0x3FFFFFFFu;  // the largest float below 2
  __device__ __forceinline__ static FixedPointScale rejection_unit(std::int64_t n) {
    return of(kRejectionUnitKey, n);
  }
  __device__ __forceinline__ static bool rejection_unit_holds(std::uint32_t max_key, std::int64_t n) {
    const std::uint32_t lowest = static_cast<std::uint32_t>(152 - mass_bits(n)) << 23;  // 2^-(S - 25)
    return max_key >= lowest && max_key <= kRejectionUnitKey;
  }

  // q of a participating key (a kept key never exceeds max_key, so the shift is <= S - len):
  // floor(p * 2^(base + 150)), which is m << shift or the floor of m / 2^-shift. The product
  // is exact whenever it is at least 2^-126: scaling by a power of two loses no bits while
  // the result is normal, and with scales of one sign the first product lies between p
  // (exact even for a subnormal p scaled up) and the second. Below 2^-126 (a product that
  // may have rounded) the truncation gives 0, as the shift does. tests/cpu/
  // test_fixed_point_scaled_mass.py checks the same float32 steps against the shifts.
  // Per element the passes that sum masses (the draw, the gather pass, the unfiltered
  // renorm) had range tests and branches here before (an exponent add for normal keys, a
  // variable 64-bit shift for subnormal ones): without them plain sampling took 0.83-0.91x
  // the time, min-p 0.84-0.98x, top-p up to 0.91x (results/history/
  // ab-sampling-scaled-mass-d8e9105.txt; dev/NOTES.md item 58).
  __device__ __forceinline__ std::uint64_t mass(std::uint32_t key) const {
    return __float2ull_rz(__fmul_rn(__fmul_rn(__uint_as_float(key), half_scale), rest_scale));
  }
  // A draw's mass of `key`: mass() where the key takes part and is kept (>= min_key), else 0.
  __device__ __forceinline__ std::uint64_t kept_mass(std::uint32_t key, std::uint32_t min_key) const {
    return (key != 0u && key >= min_key) ? mass(key) : 0;
  }

  // mass() of a normal key whose product does not underflow (exponent field >= 1 and field +
  // base + 150 > 0): then p * 2^(base + 150) is exact and is the key with base + 150 added to
  // its exponent field, so one integer add replaces mass()'s two multiplies. Where a pass
  // knows this of every key it sums (the gather pass: every key above a crossing bin of such
  // a field), it adds normal_offset() once per row and calls normal_mass per key.
  __device__ __forceinline__ std::uint32_t normal_offset() const {
    return static_cast<std::uint32_t>(base + 150) << 23;
  }
  __device__ __forceinline__ static std::uint64_t normal_mass(std::uint32_t key,
                                                              std::uint32_t offset) {
    return __float2ull_rz(__uint_as_float(key + offset));
  }
  // Whether normal_mass holds for every key of exponent field >= `field`.
  __device__ __forceinline__ bool normal_from(std::uint32_t field) const {
    return field != 0u && static_cast<int>(field) + base + 150 > 0;
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

// The top-p goal max(1, ceil(p * base)), exact for 0 <= p <= 1 (p's 24-bit mantissa times a
// base below 2^63 needs at most 87 bits; p = 1 gives base itself).
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
