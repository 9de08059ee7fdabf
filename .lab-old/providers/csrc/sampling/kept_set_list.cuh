// Listing the first search's kept set for the two-search sampler (GatherMode::kKeptSet,
// one-CTA-per-row kernels).
//
// Why: the joint and top-k-first samplers search twice, top-k then top-p, and the top-p
// search counts only the keys at or above the top-k threshold t_k (filter_sample.cuh's
// prob_filter). Over the row that search still reads the whole row once per level (two or
// three passes) for the few dozen keys that take part, and the draw reads it once more. Here
// one pass lists every key >= t_k with its position in shared memory instead; the top-p
// search's levels then read that list (SearchTarget::from_list) and the draw adds the kept
// keys' masses to their segments from it (inverse_cdf.cuh's draw_after_gather), so the row is
// read by the top-k search, this pass and the draw's one-segment rescan. Measured against the
// row search (results/history/ab-sampling-kept-list-0d6547663.txt, A B A B): joint on peaked
// rows 0.829 (128 x 128256, 91.9 -> 76.2 us), 0.914 (512 x 128256), 0.921 (128 x 32000) and
// 0.927 (512 x 32000); flat rows, whose top-k set is lighter than p (no top-p search, no
// list), 0.987-1.005.
//
// Exact: the list holds the same keys the row search would count (every key >= t_k; the rest
// had key 0 there), and this pass writes 0 to every segment of the draw, so the draw's integer
// segment masses are the sums a pass of its own would give. Same threshold, same token.
//
// A warp lists its segments' keys into its own slice (gather_append_group); where some slice
// overflows (more kept keys in one warp's segments than its share of the list), the list is
// dropped and the search and the draw read the row as without it.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "gather.cuh"
#include "radix_threshold.cuh"
#include "segment_pass.cuh"

namespace aotinfer::sampling {

// Lists the keys of the scope's row at or above floor_key (> 0) with their positions, each
// warp into its slice (sh.gathered[w] keys in warp w's), and zeroes the draw's segment masses.
// Returns whether every slice held its keys (the same in every thread).
template <typename Scope, typename Sh>
__device__ bool list_kept_set(const Scope& scope, std::uint32_t floor_key, Sh& sh) {
  static_assert(Scope::kGathers == GatherMode::kKeptSet, "the kernel's shared memory holds no list");
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), Sh::kDrawSegments);
  std::uint32_t count = 0;  // this warp's
  segment_pass(scope, layout, space.segments, [&](std::int64_t g, const float (&v)[4]) -> std::uint64_t {
    std::uint32_t k[4];
    unsigned match = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k[j] = prob_key(v[j]);  // NaN (past the end) gives key 0, below any floor
      if (k[j] >= floor_key) match |= 1u << j;
    }
    gather_append_group(space, count, match, k, static_cast<std::uint32_t>(4 * g));
    return 0;  // the draw adds the kept keys' masses from the list
  });
  const int lane = threadIdx.x & 31;
  if (lane == 0) sh.gathered[threadIdx.x >> 5] = count;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  return __syncthreads_or(lane < warps && sh.gathered[lane] > space.slice) == 0;
}

}  // namespace aotinfer::sampling
