// Counter-based random numbers (Philox4x32-10) and the stream layout every sampler uses.
//
// The uniform for element i of output row b, in stream s, with the caller's (seed, offset):
//   key     = (seed_lo32, seed_hi32 + s * 0x9E3779B9)
//   counter = (i / 4, b, offset_lo32, offset_hi32)
//   word    = philox4x32_10(counter, key)[i % 4]
//   u       = float(word) * 2^-32 + 2^-33 (float32), in (0, 1]
//   E       = -log1p(-u), the Exp(1) variate of the races (Gumbel-max, chain speculative)
// Sampling from probabilities takes one 64-bit uniform per output row instead: words x and
// y of group 0, stream 0 (inverse_cdf.cuh).
// E is formed from 1 - u through log1p so that small E -- the values that decide a race --
// keep full precision: with 24-bit uniforms, E = 0 came up once in 2^24 draws, enough for
// one of 128k tail tokens to beat a token of probability 0.99 almost 1% of the time.
// The offset lives in its own counter words, so two calls with different offsets draw
// independent numbers whatever their sizes, and each row has its own sequence, which is
// what makes per-request seeds and offsets work. core/aotinfer/reference/philox.py
// implements the same function in torch; the GPU tests compare the two.
#pragma once

#include <cstdint>

namespace aotinfer::sampling {

struct Philox4 {
  std::uint32_t x, y, z, w;
};

__host__ __device__ __forceinline__ Philox4 philox4x32_10(Philox4 c, std::uint32_t k0,
                                                          std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c.x;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c.z;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

struct RowRandom {
  std::uint32_t k0, k1, off_lo, off_hi, row;

  __device__ __forceinline__ RowRandom(std::uint64_t seed, std::uint64_t offset,
                                       std::uint32_t row_index, std::uint32_t stream) {
    k0 = static_cast<std::uint32_t>(seed);
    k1 = static_cast<std::uint32_t>(seed >> 32) + stream * 0x9E3779B9u;
    off_lo = static_cast<std::uint32_t>(offset);
    off_hi = static_cast<std::uint32_t>(offset >> 32);
    row = row_index;
  }

  // Four uniforms for elements 4*group .. 4*group+3.
  __device__ __forceinline__ Philox4 words(std::uint64_t group) const {
    return philox4x32_10(Philox4{static_cast<std::uint32_t>(group), row, off_lo, off_hi}, k0, k1);
  }

  static __device__ __forceinline__ float to_uniform(std::uint32_t word) {
    return fmaf(__uint2float_rn(word), 2.3283064365386963e-10f, 1.1641532182693481e-10f);
  }

  static __device__ __forceinline__ float exponential(std::uint32_t word) {
    return -log1pf(-to_uniform(word));
  }

  __device__ __forceinline__ float uniform(std::uint64_t i) const {
    const Philox4 w = words(i / 4);
    const std::uint32_t pick[4] = {w.x, w.y, w.z, w.w};
    return to_uniform(pick[i % 4]);
  }
};

}  // namespace aotinfer::sampling
