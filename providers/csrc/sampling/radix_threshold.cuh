// Sorting-free threshold search over one row, by radix selection on 32-bit keys.
//
// Every element maps to a key whose unsigned order is the order of its value, and (for
// probabilities) to a fixed-point mass q = p * 2^40 / row_total. Three passes over the row
// build a histogram of the next 11/11/10 key bits among the elements that match the prefix
// found so far (counts and masses, integer atomics, so the result does not depend on
// timing), and a descending scan of the histogram picks the bin where the running count or
// mass first reaches the target. After the last pass the prefix is the exact key B of the
// element where the target is reached: "keep keys >= B" is then exactly the top-k set
// (ties at the k-th value kept) or the smallest top-p set (ties kept).
//
// Key 0 marks an element that takes no part (NaN, zero, negative or infinite probability).
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "row_access.cuh"

namespace aotinfer::sampling {

constexpr int kRowThreads = 1024;
constexpr int kRadixBins = 2048;
constexpr float kMassOne = 1099511627776.0f;  // 2^40: fixed-point unit of a row's total mass

// Probabilities: positive finite values keep their bit pattern (monotone for p > 0).
__device__ __forceinline__ std::uint32_t prob_key(float p) {
  return (p > 0.f && p < INFINITY) ? __float_as_uint(p) : 0u;
}

// Any float, order-preserving over the whole line; NaN gets 0 (below -inf).
__device__ __forceinline__ std::uint32_t ordered_key(float x) {
  if (x != x) return 0u;
  const std::uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct RadixShared {
  std::uint32_t count[kRadixBins];
  std::uint32_t mass_lo[kRadixBins];  // mass = (mass_hi << 12) + mass_lo, see add_to_histogram
  std::uint32_t mass_hi[kRadixBins];
  // The crossing of one level, written by the one thread that finds it.
  std::uint32_t digit;
  int found;
  std::uint64_t above_count, above_mass, bin_count, bin_mass;
};

// Adds one element (count 1, mass q) to bin d when takes_part. The mass goes in as two 32-bit
// halves (native shared-memory atomics; a 64-bit add is not), split at bit 12 so that neither
// half's sum over a row can overflow: low parts sum to < V * 2^12, high parts to < 2^29.
__device__ __forceinline__ void add_to_histogram(RadixShared& sh, bool takes_part, std::uint32_t d,
                                                 std::uint64_t q) {
  if (!takes_part) return;
  atomicAdd(&sh.count[d], 1u);
  if (q) {
    atomicAdd(&sh.mass_lo[d], static_cast<std::uint32_t>(q & 0xFFFu));
    atomicAdd(&sh.mass_hi[d], static_cast<std::uint32_t>(q >> 12));
  }
}

struct Threshold {
  std::uint32_t key;       // keep elements with key >= key (0: keep every participant)
  std::uint64_t count_ge;  // how many participants have key >= key
  std::uint64_t mass_ge;   // their fixed-point mass
};

struct SearchTarget {
  bool by_mass;             // compare masses (top-p) or counts (top-k)
  std::uint64_t count;      // top-k: k
  float mass_fraction;      // top-p: p
  std::uint64_t mass_base;  // mass the fraction applies to; 0: the total of all participants
  bool track_mass;          // accumulate masses (always when by_mass) so mass_ge is known
};

// Searches row x (n elements of T) for the largest key B with
//   (by count) #{key >= B} >= target.count, or (by mass) mass{key >= B} >= goal.
// KeyFn(float) -> key (0: not a participant); MassFn(float) -> fixed-point mass.
template <typename T, typename KeyFn, typename MassFn>
__device__ Threshold radix_threshold(const T* x, std::int64_t n, KeyFn key_of, MassFn mass_of,
                                     SearchTarget target, RadixShared& sh) {
  const bool aligned = group_aligned(x);
  const std::int64_t groups = (n + 3) / 4;
  constexpr int kShift[3] = {21, 10, 0};
  constexpr int kBins[3] = {2048, 2048, 1024};
  std::uint32_t prefix = 0, prefix_mask = 0;
  std::uint64_t above_count = 0, above_mass = 0, bin_count = 0, bin_mass = 0;
  std::uint64_t goal = target.count;

  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level], bins = kBins[level];
    __syncthreads();  // the previous level's readers of sh are done
    for (int i = threadIdx.x; i < bins; i += blockDim.x) {
      sh.count[i] = 0;
      sh.mass_lo[i] = 0;
      sh.mass_hi[i] = 0;
    }
    if (threadIdx.x == 0) sh.found = 0;
    __syncthreads();
    for (std::int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[4];
      load_group4(x, n, g, aligned, NAN, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t k = key_of(v[j]);  // the NaN fill of a tail gives key 0
        const bool takes_part = k != 0u && (k & prefix_mask) == prefix;
        const std::uint32_t d = (k >> shift) & static_cast<std::uint32_t>(bins - 1);
        const std::uint64_t q = takes_part && (target.by_mass || target.track_mass) ? mass_of(v[j]) : 0;
        add_to_histogram(sh, takes_part, d, q);
      }
    }
    __syncthreads();

    // Descending scan: thread t owns bins hi = bins-1-2t and lo = hi-1 (none when hi < 0).
    const int hi = bins - 1 - 2 * static_cast<int>(threadIdx.x), lo = hi - 1;
    const std::uint64_t c_hi = hi >= 0 ? sh.count[hi] : 0, c_lo = lo >= 0 ? sh.count[lo] : 0;
    auto mass_of_bin = [&](int bin) -> std::uint64_t {
      return bin < 0 ? 0 : (static_cast<std::uint64_t>(sh.mass_hi[bin]) << 12) + sh.mass_lo[bin];
    };
    const std::uint64_t m_hi = mass_of_bin(hi), m_lo = mass_of_bin(lo);
    std::uint64_t total_count, total_mass;
    const std::uint64_t before_c = block_exclusive_scan(c_hi + c_lo, &total_count);
    const std::uint64_t before_m = block_exclusive_scan(m_hi + m_lo, &total_mass);
    if (level == 0) {
      if (target.by_mass) {
        const std::uint64_t base = target.mass_base ? target.mass_base : total_mass;
        const double g = ceil(static_cast<double>(target.mass_fraction) * static_cast<double>(base));
        goal = g < 1.0 ? 1 : static_cast<std::uint64_t>(g);
      }
      const std::uint64_t total = target.by_mass ? total_mass : total_count;
      if (total < goal) {
        // Fewer participants (or less mass) than the target: keep them all.
        return Threshold{0u, total_count, total_mass};
      }
    }
    const std::uint64_t start = target.by_mass ? above_mass + before_m : above_count + before_c;
    const std::uint64_t v_hi = target.by_mass ? m_hi : c_hi, v_lo = target.by_mass ? m_lo : c_lo;
    if (hi >= 0 && start < goal) {
      if (start + v_hi >= goal) {
        sh.digit = static_cast<std::uint32_t>(hi);
        sh.above_count = above_count + before_c;
        sh.above_mass = above_mass + before_m;
        sh.bin_count = c_hi;
        sh.bin_mass = m_hi;
        sh.found = 1;
      } else if (lo >= 0 && start + v_hi + v_lo >= goal) {
        sh.digit = static_cast<std::uint32_t>(lo);
        sh.above_count = above_count + before_c + c_hi;
        sh.above_mass = above_mass + before_m + m_hi;
        sh.bin_count = c_lo;
        sh.bin_mass = m_lo;
        sh.found = 1;
      }
    }
    __syncthreads();
    if (!sh.found) break;  // cannot happen (see below); keeps the prefix found so far
    // A crossing always exists once level 0 holds enough: each bin's contents are exactly
    // what the next level splits.
    prefix |= sh.digit << shift;
    prefix_mask |= static_cast<std::uint32_t>(bins - 1) << shift;
    above_count = sh.above_count;
    above_mass = sh.above_mass;
    bin_count = sh.bin_count;
    bin_mass = sh.bin_mass;
  }
  return Threshold{prefix, above_count + bin_count, above_mass + bin_mass};
}

}  // namespace aotinfer::sampling
