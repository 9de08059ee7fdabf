// Top-k then top-p (FlashInfer's default filter_apply_order "top_k_first") in the two-search
// list kernels (cluster_local_top_k.cuh, 1-16 rows below 262144, k <= 64): rank 0 copies the
// row's top-k set (at most 64 keys) out of its list, finds the top-p set within it and draws,
// with warp 0 alone, where two_search_list_filter runs a top-k search with masses and a top-p
// search over the list (each up to three block-wide levels of about six block barriers) and
// the block-wide list draw follows.
//
// Measured (session 47, dev/NOTES.md item 79; A B A B in one machine start, graph us,
// history/ab-sampling-top-k-first-adopted-b5695fa.txt): top-k then top-p 0.79-0.94x at 1 and
// 16 rows of 32000 and 128256 (1 x 32000 flat 18.0 -> 15.2 us, 16 x 128256 flat 37.2 -> 30.7),
// joint 0.99-1.01x and top-k 0.98-1.00x in the same kernels. Joint top-k / top-p stays on the
// searches: through this path (lab AOTINFER_LAB_JOINT_WARP, ab-sampling-top-k-first-in-warp-
// 7f4181d.txt) it ran 1.09-1.20x at 1 row and 16 x 32000 flat (its top-k search with masses
// usually ends the row at once, the whole set kept, which is cheaper than the copy and sort
// here), 0.85x only at 16 x 32000 peaked. AOTINFER_LAB_TOP_K_FIRST_SEARCHES builds the
// searches for top-k then top-p again (the A/B's other side).
//
// Why the tokens stay the searches' (the reference's too): a search's bin mass is the bin's
// mantissa sum shifted once by (exponent field + base). Where that shift is not negative for
// every key of the set, the bin sums equal the sums of each key's mantissa << (field + base)
// (exact_key_mass), so the set's mass is the top-k search's mass_ge and the largest key whose
// running mass (keys in descending order) reaches a goal is the top-p search's key. The set
// is copied in list order, which is row order, and holds every key the draw keeps, so the
// inverse CDF over it has the list draw's prefix sums. A set of more than 64 keys (ties at
// t_k), or one whose smallest key sits more than S - 24 binades below the row's largest (24
// at vocab 32000, 22 at 128256: the bin sums would floor), is left to the searches.
// dev/model_joint_warp_lab.py models these steps lane by lane and checks them, and the
// verdict against the searches', on the CPU.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "fixed_point.cuh"
#include "inverse_cdf.cuh"
#include "philox.cuh"
#include "radix_threshold.cuh"

namespace aotinfer::sampling {

#ifdef AOTINFER_LAB_TOP_K_FIRST_SEARCHES
constexpr bool kLabTopKFirstSearches = true;
#else
constexpr bool kLabTopKFirstSearches = false;
#endif

// Two keys a lane; the list path serves k <= 64 (kLocalListRegion / 2).
constexpr int kWarpSetMax = 64;

// Rank 0's copy of the top-k set, in its shared memory.
struct WarpSet {
  std::uint32_t keys[kWarpSetMax];  // in list (row) order
  std::uint32_t positions[kWarpSetMax];
  std::uint32_t sorted[kWarpSetMax];  // the keys, descending
  std::uint64_t cum[kWarpSetMax];     // the exact masses of sorted[0 .. i]; from the set's size on, its mass
  bool left_to_searches;              // the warp's verdict, for the block
};

namespace detail {

// A key's mass in the searches' unit `base`, for a key whose shift (field + base) is not
// negative: exactly what its share of a bin sum comes to.
__device__ __forceinline__ std::uint64_t exact_key_mass(std::uint32_t key, int base) {
  if (key == 0u) return 0;
  return static_cast<std::uint64_t>(FixedPointScale::mantissa(key)) << (FixedPointScale::biased_exponent(key) + base);
}

// What warp_copy_set found: how many keys the list holds at or above the floor (past
// kWarpSetMax the copy is incomplete), and the largest and smallest of them (0 / ~0 if none).
struct CopiedSet {
  int size;
  std::uint32_t largest, smallest;
};

// Warp 0: the list's keys >= set_floor (>= 1) with their positions into ws, in list order.
// A step reads 128 entries, four a lane as one float4 (entries 4 lane .. 4 lane + 3), and four
// ballots place them: an entry's place counts the kept entries of the lanes before and its
// own before it. The steps depend on one another only through the running count, so two
// steps' loads are in flight at a time (a ballot a 32-entry step, with a test of the count
// ending the loop, waited for each load in turn); unrolled further, the code a single row's
// launch must fetch grows by ~1.6 KB a step.
template <int kEntries>
__device__ CopiedSet warp_copy_set(const float* keys, const std::uint32_t* positions, std::uint32_t set_floor,
                                   WarpSet& ws) {
  static_assert(kEntries % 128 == 0, "whole steps of 128 entries");
  const unsigned lane = threadIdx.x & 31u;
  const unsigned before = (1u << lane) - 1u;  // the lanes before this one
  int size = 0;
  std::uint32_t largest = 0u, smallest = ~0u;  // this lane's
#pragma unroll 2
  for (int first = 0; first < kEntries; first += 128) {
    // A list entry is 0 (empty) or a listed key (positive and finite), so its bits are its key.
    const float4 q = reinterpret_cast<const float4*>(keys + first)[lane];
    const std::uint32_t k[4] = {__float_as_uint(q.x), __float_as_uint(q.y), __float_as_uint(q.z),
                                __float_as_uint(q.w)};
    int at = size;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned ins = __ballot_sync(kFullMask, k[j] >= set_floor);
      at += __popc(ins & before);
      size += __popc(ins);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (k[j] < set_floor) continue;
      largest = max(largest, k[j]);
      smallest = min(smallest, k[j]);
      if (at < kWarpSetMax) {
        ws.keys[at] = k[j];
        ws.positions[at] = positions[first + 4 * static_cast<int>(lane) + j];
      }
      ++at;
    }
  }
  __syncwarp();
  return CopiedSet{size, __reduce_max_sync(kFullMask, largest), __reduce_min_sync(kFullMask, smallest)};
}

// Warp 0: ws.keys[0, size) in descending order into ws.sorted (a key's place: the keys larger,
// and the equal keys copied before it) and their running exact masses into ws.cum. Returns
// the set's mass. Every shift must be non-negative (the caller checked the smallest key).
__device__ __forceinline__ std::uint64_t warp_sort_set(WarpSet& ws, int size, int base) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::uint32_t a = lane < size ? ws.keys[lane] : 0u, b = lane + 32 < size ? ws.keys[lane + 32] : 0u;
  int place_a = 0, place_b = 0;
  for (int j = 0; j < size; ++j) {  // (the same j in every lane)
    const std::uint32_t other = __shfl_sync(kFullMask, j < 32 ? a : b, j & 31);
    place_a += (other > a || (other == a && j < lane)) ? 1 : 0;
    place_b += (other > b || (other == b && j < lane + 32)) ? 1 : 0;
  }
  if (lane < size) ws.sorted[place_a] = a;
  if (lane + 32 < size) ws.sorted[place_b] = b;
  __syncwarp();
  const std::uint32_t s0 = 2 * lane < size ? ws.sorted[2 * lane] : 0u;
  const std::uint32_t s1 = 2 * lane + 1 < size ? ws.sorted[2 * lane + 1] : 0u;
  const std::uint64_t q1 = exact_key_mass(s1, base);
  const std::uint64_t inclusive = warp_inclusive_scan(exact_key_mass(s0, base) + q1);
  ws.cum[2 * lane] = inclusive - q1;
  ws.cum[2 * lane + 1] = inclusive;
  __syncwarp();
  return __shfl_sync(kFullMask, inclusive, 31);
}

// Warp 0: the largest key of the set whose running mass reaches `goal` (at most the set's
// mass): the key at the first place where ws.cum reaches it. Equal keys share a running mass
// at their last place, and every larger key's ends before, short of the goal.
__device__ __forceinline__ std::uint32_t warp_key_reaching(const WarpSet& ws, std::uint64_t goal) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int holder = __ffs(__ballot_sync(kFullMask, ws.cum[2 * lane + 1] >= goal)) - 1;
  return ws.sorted[2 * holder + (ws.cum[2 * holder] >= goal ? 0 : 1)];
}

// Warp 0: the token of the inverse CDF over the set's keys >= min_key in list order, in the
// draw's unit of the row's largest key max_key (draw_from_local_list's: the list's other
// entries are below min_key, so the prefix sums are the same). -1: nothing to draw.
__device__ __forceinline__ std::int64_t warp_draw_from_set(const WarpSet& ws, int size, std::uint32_t min_key,
                                                           std::uint32_t max_key, std::int64_t n,
                                                           const RowRandom& rng) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const FixedPointScale fx = FixedPointScale::of(max_key, n);
  auto mass = [&](int i) -> std::uint64_t { return fx.kept_mass(i < size ? ws.keys[i] : 0u, min_key); };
  const std::uint64_t q0 = mass(2 * lane), own = q0 + mass(2 * lane + 1);
  const std::uint64_t inclusive = warp_inclusive_scan(own);
  const std::uint64_t total = __shfl_sync(kFullMask, inclusive, 31);
  if (total == 0) return -1;
  const WarpCrossing holder = warp_crossing(own, inclusive, __umul64hi(draw_word(rng, 0), total));
  return ws.positions[2 * holder.lane + (holder.rest < __shfl_sync(kFullMask, q0, holder.lane) ? 0 : 1)];
}

}  // namespace detail

}  // namespace aotinfer::sampling
