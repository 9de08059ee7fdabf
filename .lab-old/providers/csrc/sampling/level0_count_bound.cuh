// Level 0 of the list kernels' slice search (cluster_local_top_k.cuh's t_c) with its histogram
// scanned by one warp (session 52, dev/NOTES.md item 84).
//
// The slice search asks for a bound, not a key: any key at most the slice's k-th largest with
// at most `enough` keys at or above it (radix_threshold's SearchTarget::enough). Where level 0
// settles that (the usual case for slices of a few thousand keys: the crossing bin, a quarter
// of a binade, holds tens of keys), radix_threshold's level 0 costs more than the question:
// it clears the mass histograms too, scans 2048 bins by a block scan of (count, mass) pairs and
// publishes the crossing through shared memory, six block barriers in all. Here the counts
// alone are cleared and filled, and warp 0 scans them: each lane sums a run of 64 bins, a warp
// scan finds the run that reaches k, and a second warp scan over that run's 32 pairs finds the
// bin. Three block barriers. The crossing bin, the count above it and the bin's count are
// those of radix_threshold's level 0 (the same bins, the same descending order), so where its
// level 0 stops (the bin holds one key, or fills k exactly, or `enough` holds) the bound is
// its key, the bin's lowest number; elsewhere kBoundUndecided, and the caller runs the search.
// So the list is the same and so is the token (dev/model_level0_count_bound.py models the
// warp's scan against that level 0 on random slices). Measured as lab
// AOTINFER_LAB_SLICE_BOUND_IN_WARP on an H100 (A B A B in one machine start, graph us;
// history/ab-sampling-slice-bound-in-warp-a53150c-h100.txt): top-k 0.946-0.947x at 1 x 32000
// (peaked 10.4 -> 9.8), 0.96-0.97x at 16 x 32000 and 1 x 128256; joint 0.88-0.91x at 1 x
// 32000 (peaked 12.3 -> 11.1), 0.90-0.95x at 16 x 32000, 0.98-0.99x at 1 x 128256; the same
// tokens, the sampling tests passing under it. That lab bounded slices of up to 2048 groups
// only; every slice since session 53 (lab AOTINFER_LAB_SLICE_BOUND_ALL_SLICES, H100,
// history/ab-sampling-slice-bound-all-slices-d40d699-h100.txt): 0.968-0.976x for top-k and
// joint at 16 x 128256 (slices of 16032 keys; top-k peaked 24.0 -> 23.2), 0.99-1.00x at the
// sizes the bound of 2048 groups already took, the same tokens (dev/model_level0_count_bound.py
// had found level 0 settling every slice of bench_sampling's flat and peaked rows at 128256).
// The caller keeps that lab's slice-size test, which never fails, for the SASS it gives
// (cluster_local_top_k.cuh says why).
//
// Rank 0's exact search over its list (cluster_local_top_k.cuh's list_top_k) does not take
// this level 0: lab AOTINFER_LAB_LIST_KEY_IN_WARP (level 0 by one warp with `enough` 0, then
// finish_in_warp where the crossing bin held at most 32 keys) ran 1.03-1.10x on flat rows and
// 0.98-0.99x on sharp ones (H100, session 53,
// history/ab-sampling-list-key-in-warp-d40d699-h100.txt): a list's crossing bin mostly holds
// more keys than that, so the two passes were paid twice.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "lab_row_trace.cuh"
#include "radix_threshold.cuh"

namespace aotinfer::sampling {

// No key is this (the largest bin's lowest key is 0xffe00000).
constexpr std::uint32_t kBoundUndecided = 0xffffffffu;

// The level-0 counts of the bound below: load_slice (slice_kernels.cuh) adds each group's keys
// as it stores the group, for the list kernels, so the adds run while other warps wait on
// their loads and the bound only scans. Before, the bound filled them itself (clear, a pass
// over the slice in shared memory, two block barriers: ~3.2k of the top-k kernel's ~16k
// cycles at 1 x 32000, history/trace-slice-phases-e8fda70-h100.txt). Measured as lab
// AOTINFER_LAB_FILL_IN_LOAD (session 58, H100, A B A B in one machine start, the same tokens;
// history/ab-sampling-fill-in-load-7366653-h100.txt): top-k 0.94-0.97x, joint and top-k then
// top-p 0.95-0.99x at 1-16 rows of 32000 and 1-4 rows of 128256, 0.98-1.00x at 16 x 128256.
// The same keys are counted (the copy stores what the pass read back), so the bound, the
// list and the token are the same. (The hardware aggregates a warp's increments of one bin:
// the adds compile to ATOMS.POPC.INC.32.)
// Clears the level-0 counts, as pairs (sh.count is 8-byte aligned); the caller's barrier
// follows before any count_level0_group.
template <typename Sh>
__device__ __forceinline__ void clear_level0_counts(Sh& sh) {
  uint2* pairs = reinterpret_cast<uint2*>(sh.count);
  for (int i = threadIdx.x; i < Sh::kBins / 2; i += blockDim.x) pairs[i] = make_uint2(0u, 0u);
}
template <typename Sh>
__device__ __forceinline__ void count_level0_group(Sh& sh, const float (&v)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t key = prob_key(v[j]);  // the NaN fill of a tail gives key 0
    if (key != 0u) atomicAdd(&sh.count[key >> Sh::shift(0)], 1u);
  }
}

// The bound of a count search for k over `scope`'s probabilities that radix_threshold's level 0
// would return with SearchTarget::enough = `enough` (0: fewer than k keys take part), or
// kBoundUndecided where its level 0 would not stop. Every thread gets the same value. At
// entry `sh.count` holds the slice's level-0 counts (load_slice<kCtas, true>, slice_kernels.cuh)
// and nothing else of `sh`'s histograms is in use; they are free again on return.
template <typename Scope, typename Sh>
__device__ __noinline__ std::uint32_t level0_count_bound(const Scope& scope, std::uint32_t k, std::uint32_t enough,
                                                         Sh& sh) {
  __shared__ std::uint32_t bound;
  constexpr int kBins = Sh::kBins;
  constexpr int kRun = kBins / 32;    // the bins a lane sums
  constexpr int kPairs = kRun / 2;    // as pairs (8-byte loads: sh.count is 8-byte aligned)
  static_assert(kPairs == 32, "one pair of the crossing run a lane");
  uint2* pairs = reinterpret_cast<uint2*>(sh.count);
  // The counts come from load_slice, whose closing cluster barrier does not order the adds a
  // thread made after arriving: the block barrier below does. (`scope` stays a parameter:
  // the build measured passes it, and this __noinline__ function's code follows its
  // signature.)
  (void)scope;
  __syncthreads();
  LAB_SLICE(lab_slice_mark(6));
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    // Lane l sums run l, bins [kBins - kRun (l + 1), kBins - kRun l): the highest run first.
    // It starts at its own pair l, so that the 16 lanes of a wavefront hit different banks.
    const int run_first = (kBins - kRun * (lane + 1)) / 2;
    std::uint32_t own = 0;
#pragma unroll 8
    for (int i = 0; i < kPairs; ++i) {
      const uint2 c = pairs[run_first + (i + lane) % kPairs];
      own += c.x + c.y;
    }
    const std::uint32_t through = warp_inclusive_scan(own);
    const unsigned reached = __ballot_sync(kFullMask, through >= k);
    std::uint32_t result = 0u;  // fewer than k participants: keep them all (the search's key 0)
    if (reached != 0u) {
      const int run = __ffs(static_cast<int>(reached)) - 1;
      const std::uint32_t above_run = __shfl_sync(kFullMask, through - own, run);
      // The run's pairs from the top, lane l taking pair l (its .y the higher bin).
      const int pair = (kBins - kRun * run) / 2 - 1 - lane;
      const uint2 c = pairs[pair];
      const std::uint32_t pair_count = c.x + c.y;
      const std::uint32_t pair_through = above_run + warp_inclusive_scan(pair_count);
      // (Some lane reaches k: the run's last pair ends at `through` of lane `run`.)
      const int at = __ffs(static_cast<int>(__ballot_sync(kFullMask, pair_through >= k))) - 1;
      std::uint32_t above = pair_through - pair_count, bin = 2u * pair + 1u, count = c.y;
      if (above + c.y < k) {
        above += c.y;
        bin -= 1u;
        count = c.x;
      }
      // radix_threshold's stops after level 0 (its early exit, then `enough`).
      const bool stops = count == 1u || above + count == k || above + count <= enough;
      result = __shfl_sync(kFullMask, stops ? bin << Sh::shift(0) : kBoundUndecided, at);
    }
    if (lane == 0) bound = result;
  }
  __syncthreads();
  return bound;
}

}  // namespace aotinfer::sampling
