// The draw's view of a row: segments of whole warp loads (32 groups, 128 elements), each
// summed by one warp. inverse_cdf.cuh sums kept masses per segment with it; the gather pass
// (radix_threshold.cuh, gather.cuh) walks the row in the same order so that it can sum the
// same segment masses while it gathers.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"

namespace aotinfer::sampling {

constexpr int kSegmentUnitGroups = 32;  // one group per lane of a warp

// The segments of the groups a CTA holds: at most `max_segments` (the shared-memory array),
// each of per_segment warp loads (1 unless V > 128 max_segments).
struct SegmentLayout {
  std::int64_t groups, per_segment, segments;

  __host__ __device__ static SegmentLayout of(std::int64_t groups, std::int64_t max_segments) {
    const std::int64_t units = (groups + kSegmentUnitGroups - 1) / kSegmentUnitGroups;
    const std::int64_t per = (units + max_segments - 1) / max_segments;
    return SegmentLayout{groups, per > 0 ? per : 1, per > 0 ? (units + per - 1) / per : 0};
  }
};

// The warp sums of four 64-bit values in 6 shuffles instead of 20. Partners exchange halves
// of what they hold: across 16 lanes the lower lanes keep values 0-1 and the upper 2-3;
// across 8 lanes one of the two is kept; the one value left is summed over the other three
// lane bits. Lane l ends with the total of value 2 * bit4(l) + bit3(l), so lane 8 u holds
// value u's. Integer sums: the same totals as four warp_reduce calls. In the gather pass of
// flat top-p at 128 x 128256 the four warp_reduce calls were 83 of the loop body's 610
// instructions (history/ncu-sampling-rows-lines-a0ec50d.txt); with this, the samplers took
// 0.96-0.99x the time (dev/NOTES.md item 58).
__device__ __forceinline__ std::uint64_t warp_sum4_transposed(const std::uint64_t (&v)[4], int lane) {
  const bool upper16 = (lane & 16) != 0, upper8 = (lane & 8) != 0;
  std::uint64_t keep0 = upper16 ? v[2] : v[0], keep1 = upper16 ? v[3] : v[1];
  const std::uint64_t send0 = upper16 ? v[0] : v[2], send1 = upper16 ? v[1] : v[3];
  keep0 += __shfl_xor_sync(kFullMask, send0, 16);
  keep1 += __shfl_xor_sync(kFullMask, send1, 16);
  std::uint64_t keep = upper8 ? keep1 : keep0;
  keep += __shfl_xor_sync(kFullMask, upper8 ? keep0 : keep1, 8);
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) keep += __shfl_xor_sync(kFullMask, keep, m);
  return keep;
}

// seg[a][s] = the sum over segment s of mass_of(g, v, m)'s m[a], a < kSums, for its groups g
// (v: elements 4g .. 4g+3, NaN past the end), four segments per warp in flight, the row
// ascending or descending as the scope says (the sums do not depend on it); seg may be
// nullptr when only mass_of's side effects are wanted. Every lane of a warp calls mass_of in
// the same rounds (out-of-range groups with all-NaN v), so mass_of may use warp collectives.
// Groups below the scope's whole groups load without tail checks. kSums = 2: top-p by
// rejection sums the masses above both pivots per segment in one pass.
template <int kSums, int kInFlight = 4, typename Scope, typename MassFn>
__device__ void segment_pass_sums(const Scope& scope, const SegmentLayout& layout, std::uint64_t* const* seg,
                                  MassFn&& mass_of) {
  // 32-bit indices (the launchers take rows of at most 2^31 - 1 elements): they took the
  // top-k / top-p / two-search sampling kernels from 60 / 76 / 16 B of spills to none (the
  // gather pass runs with a threshold search's state live).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int whole = static_cast<int>(scope.whole_local_groups()), per = static_cast<int>(layout.per_segment);
  const int segments = static_cast<int>(layout.segments), groups = static_cast<int>(layout.groups);
  // Rounds of kInFlight * warps segments, warp w taking segments w, w + warps, ... of each;
  // the rounds in the direction the scope gives this pass (RowScope::next_pass_descending).
  const int round = kInFlight * warps, rounds = (segments + round - 1) / round;
  const bool descending = scope.next_pass_descending();
  for (int r = 0; r < rounds; ++r) {
    const int s0 = (descending ? rounds - 1 - r : r) * round + warp;
    if (s0 >= segments) continue;
    std::uint64_t sum[kSums][kInFlight] = {};
    for (int c = 0; c < per; ++c) {
      float v[kInFlight][4];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int s = s0 + u * warps, g = (s * per + c) * kSegmentUnitGroups + lane;
        if (g < whole) {  // then s < segments and g < groups
          scope.load_whole(g, v[u]);
        } else if (s < segments && g < groups) {
          scope.load(g, v[u]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[u][j] = NAN;
        }
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        std::uint64_t m[kSums];
        mass_of(((s0 + u * warps) * per + c) * kSegmentUnitGroups + lane, v[u], m);
#pragma unroll
        for (int a = 0; a < kSums; ++a) sum[a][u] += m[a];
      }
    }
    if (seg != nullptr) {
#pragma unroll
      for (int a = 0; a < kSums; ++a) {
        if constexpr (kInFlight == 4) {
          const std::uint64_t total = warp_sum4_transposed(sum[a], lane);
          const int u = lane >> 3;  // lanes 0, 8, 16 and 24 hold the four totals
          if ((lane & 7) == 0 && s0 + u * warps < segments) seg[a][s0 + u * warps] = total;
        } else {
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) {
            const std::uint64_t total = warp_reduce(sum[a][u], SumOp{});
            if (lane == 0 && s0 + u * warps < segments) seg[a][s0 + u * warps] = total;
          }
        }
      }
    }
  }
}

// segment_pass_sums with one sum, mass_of(g, v) returning it: seg[s] (seg may be nullptr).
template <int kInFlight = 4, typename Scope, typename MassFn>
__device__ void segment_pass(const Scope& scope, const SegmentLayout& layout, std::uint64_t* seg, MassFn&& mass_of) {
  std::uint64_t* const arrays[1] = {seg};
  segment_pass_sums<1, kInFlight>(scope, layout, seg != nullptr ? arrays : nullptr,
                                  [&](std::int64_t g, const float (&v)[4], std::uint64_t (&m)[1]) { m[0] = mass_of(g, v); });
}

}  // namespace aotinfer::sampling
