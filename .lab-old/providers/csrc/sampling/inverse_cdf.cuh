// Drawing one token from a row's kept probabilities by the inverse CDF in fixed point, with
// one 64-bit uniform per output row (core/aotinfer/reference/sampling.py, "Drawing", is the
// definition and the oracle).
//
// Every kept probability becomes an integer q = floor(p * 2^(S - e)) (e: the exponent just
// above the row's largest kept probability, S = 63 - bitlength(V)), an exact shift of its
// 24-bit mantissa, so the row's total stays below 2^63. Integer sums do not depend on their
// order: whichever threads or CTAs add the masses up, the target floor(R * T / 2^64) lands
// on the same token. One pass over the row writes the mass of every segment of 32 groups
// (one warp load: 128 elements) to shared memory; a scan of the segment masses finds the
// segment holding the target (one warp's in a one-CTA scope, the block's and then the
// cluster's in a cluster), and one warp rescans that segment to find the element.
// Per element this costs a shift and an add, where a race costs a Philox word, a log and a
// division.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "philox.cuh"
#include "fixed_point.cuh"
#include "radix_threshold.cuh"
#include "segment_pass.cuh"

namespace aotinfer::sampling {

// The largest participating key of the scope's row (0: none).
template <typename Scope>
__device__ std::uint32_t largest_key(const Scope& scope) {
  std::uint32_t mx = 0u;
  scope.for_each_group(0.f, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) mx = max(mx, prob_key(v[j]));
  });
  return scope.reduce(mx, MaxOp{}, 0u);
}

// q of each element of a group, 0 for the elements that are not kept (key 0 or below
// min_key; the NaN fill of a tail has key 0).
__device__ __forceinline__ std::uint64_t group_masses(const float (&v)[4], std::uint32_t min_key,
                                                      const FixedPointScale& fx, std::uint64_t (&q)[4]) {
  std::uint64_t sum = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t k = prob_key(v[j]);
    q[j] = fx.kept_mass(k, min_key);
    sum += q[j];
  }
  return sum;
}

// The 64-bit uniform of draw `round` of a row: words 2 round and 2 round + 1 of its stream
// (round 0: the first two, the one draw of every sampler but rejection top-p's later rounds).
__device__ __forceinline__ std::uint64_t draw_word(const RowRandom& rng, int round) {
  const Philox4 w = rng.words(static_cast<std::uint64_t>(round >> 1));
  return (round & 1) ? (static_cast<std::uint64_t>(w.z) << 32) | w.w : (static_cast<std::uint64_t>(w.x) << 32) | w.y;
}

// Step 3 of the draw, by one whole warp: the element of segment s where the mass `rest`
// (below the segment's kept mass) runs out. The lane that finds it writes its index to
// *token and, if want_key, its key to *key (shared memory: the caller's barrier publishes).
template <typename Scope>
__device__ __forceinline__ void find_in_segment(const Scope& scope, const SegmentLayout& layout, std::int64_t s,
                                                std::uint64_t rest, std::uint32_t min_key, const FixedPointScale& fx,
                                                bool want_key, std::int64_t* token, std::uint32_t* key) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t c = 0; c < layout.per_segment; ++c) {
    const std::int64_t g = (s * layout.per_segment + c) * kSegmentUnitGroups + lane;
    float v[4] = {NAN, NAN, NAN, NAN};
    if (g < layout.groups) scope.load(g, v);
    std::uint64_t q[4];
    const std::uint64_t mass = group_masses(v, min_key, fx, q);
    const std::uint64_t inclusive = warp_inclusive_scan(mass);
    const std::uint64_t unit_total = __shfl_sync(kFullMask, inclusive, 31);
    if (rest < unit_total) {  // the same decision in every lane
      const unsigned past = __ballot_sync(kFullMask, inclusive > rest);
      if (lane == __ffs(past) - 1) {
        std::uint64_t within = rest - (inclusive - mass);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (within < q[j]) {
            *token = 4 * (scope.first_group() + g) + j;
            if (want_key) *key = prob_key(v[j]);  // (no code in the draws that do not ask)
            break;
          }
          within -= q[j];
        }
      }
      return;
    }
    rest -= unit_total;
  }
}

// What draw_from_segments returns where its step across the scope said not to search.
constexpr std::int64_t kDrawNotSearched = -3;

// The draw's step across the scope (by every thread): the CTAs' totals, exclusive_across's
// push and cluster barrier in a cluster. Always searches.
struct ScopeTotals {
  template <typename Scope>
  __device__ bool operator()(const Scope& scope, std::uint64_t cta_total, std::uint64_t* before,
                             std::uint64_t* total) const {
    scope.exclusive_across(cta_total, before, total);
    return true;
  }
};

// Steps 2 and 3 of the draw, once seg holds the kept mass of every segment of `layout`, all of
// it by warp 0: each lane sums a run of the CTA's segments, a warp scan gives the CTA's total
// and finds the lane and then the segment holding the target, and the same warp finds the
// element. In a cluster the CTAs' totals cross by one push and one cluster barrier
// (exclusive_across) and only the CTA whose share of the total holds the target looks further.
// One block barrier in all, where a block scan and the hand-over to the finding warp took
// five; the same integer prefix sums, so the same token (in the clusters: top-p, min-p and
// plain sampling 0.87-0.93x the time at 1 and 16 rows, history/ab-sampling-
// cluster-warp-draw-324f32b.txt). Every row kernel's sampler ends in one draw, and top-p by
// rejection draws once a round: at 128 x 32000 a round's draw and test took about half as long
// as round 0's pass over the row (LabRowTrace: ~7400 SM cycles against ~13900; dev/NOTES.md
// item 74).
// Returns what inverse_cdf_draw returns; `total` (if given) gets the scope's total, and
// `drawn` (if given) the drawn token's key in the CTA holding it (0 in the others). `across`
// takes the CTAs' totals across the scope; where it says not to search (a draw from masses
// that may not hold: top_p_rejection.cuh's round 0 in a cluster), the draw returns
// kDrawNotSearched.
template <typename Scope, typename Across = ScopeTotals>
__device__ std::int64_t draw_from_segments(const Scope& scope, const SegmentLayout& layout, const std::uint64_t* seg,
                                           std::uint32_t min_key, const FixedPointScale& fx, const RowRandom& rng,
                                           int round = 0, std::uint64_t* total = nullptr,
                                           std::uint32_t* drawn = nullptr, const Across& across = Across{}) {
  __shared__ std::int64_t found_token;
  __shared__ std::uint32_t found_key;
  __shared__ std::uint64_t found_total;
  const int lane = threadIdx.x & 31;
  const std::int64_t segments = layout.segments, per_lane = (segments + 31) / 32, mine = lane * per_lane;
  std::uint64_t own = 0, inclusive = 0, cta_total = 0;  // (warp 0's)
  if (threadIdx.x < 32) {
    // (Unrolled, so that the loads go out before their adds wait: up to 48 segments a lane.)
#pragma unroll 4
    for (std::int64_t i = 0; i < per_lane; ++i) own += mine + i < segments ? seg[mine + i] : 0;
    inclusive = warp_inclusive_scan(own);
    cta_total = __shfl_sync(kFullMask, inclusive, 31);
  }
  std::uint64_t before_cta, row_total;  // (by every thread: a cluster's barrier is in it)
  const bool search = across(scope, cta_total, &before_cta, &row_total);
  if (threadIdx.x < 32) {
    if (lane == 0) found_total = row_total;
    const std::uint64_t target = __umul64hi(draw_word(rng, round), row_total);  // < row_total
    if (!search) {
      if (lane == 0) found_token = kDrawNotSearched;
    } else if (row_total == 0 || target < before_cta || target - before_cta >= cta_total) {
      if (lane == 0) found_token = row_total == 0 ? -1 : -2;  // -2: another CTA of the cluster
    } else {
      const std::uint64_t local = target - before_cta;
      const int holder = __ffs(__ballot_sync(kFullMask, inclusive > local)) - 1;
      // The holder's run of segments, 32 at a time across the warp (every lane decides alike).
      const std::int64_t first = holder * per_lane, end = min(first + per_lane, segments);
      std::uint64_t rest = local - __shfl_sync(kFullMask, inclusive - own, holder);
      std::int64_t s = first;
      for (std::int64_t base = first; base < end; base += 32) {
        const std::uint64_t m = base + lane < end ? seg[base + lane] : 0;
        const std::uint64_t run = warp_inclusive_scan(m);
        const std::uint64_t run_total = __shfl_sync(kFullMask, run, 31);
        if (rest < run_total) {
          const int at = __ffs(__ballot_sync(kFullMask, run > rest)) - 1;
          s = base + at;
          rest -= __shfl_sync(kFullMask, run - m, at);
          break;
        }
        rest -= run_total;
      }
      find_in_segment(scope, layout, s, rest, min_key, fx, drawn != nullptr, &found_token, &found_key);
    }
  }
  __syncthreads();
  if (total) *total = found_total;
  if (drawn) *drawn = found_token >= 0 ? found_key : 0u;
  return found_token;
}

// Draws from the elements of the scope's row with min_key <= key (key != 0), max_key the
// largest of them. Every CTA of the scope must call it. Returns, in every thread of a CTA:
// the token (an index into the row) in the CTA that holds it, -2 in the other CTAs of a
// cluster, -1 everywhere when nothing is kept. sh's histograms are overwritten.
template <typename Scope, typename Sh>
__device__ std::int64_t inverse_cdf_draw(const Scope& scope, std::int64_t n, std::uint32_t min_key,
                                         std::uint32_t max_key, const RowRandom& rng, Sh& sh) {
  const FixedPointScale fx = FixedPointScale::of(max_key, n);
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), Sh::kDrawSegments);
  scope.reuse_histograms();  // the threshold search (in any CTA of the scope) no longer reads sh
  // 1. The mass of every segment.
  segment_pass(scope, layout, sh.segment_mass, [&](std::int64_t, const float (&v)[4]) {
    std::uint64_t q[4];
    return group_masses(v, min_key, fx, q);
  });
  __syncthreads();
  return draw_from_segments(scope, layout, sh.segment_mass, min_key, fx, rng);
}

// The draw after a gather pass that summed the segment masses of every kept key above the
// gathered bin (radix_threshold.cuh, gather_crossing_bin): the bin's kept keys (of the
// `gathered` listed) add their masses to their segments, and the draw goes on from the same
// integer segment masses a pass of its own would have summed. `gathered`: this warp's count.
template <typename Scope>
__device__ std::int64_t draw_after_gather(const Scope& scope, std::int64_t n, std::uint32_t min_key,
                                          std::uint32_t max_key, const GatherSizes& sizes, std::uint32_t gathered,
                                          const RowRandom& rng) {
  const GatherSpace space = GatherSpace::of(sizes);
  const FixedPointScale fx = FixedPointScale::of(max_key, n);
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), RadixShared::kDrawSegments);
  const std::uint32_t first = space.slice_begin;  // this warp's slice, `gathered` long
  // Each lane sums a contiguous run of the list and adds once per segment it meets: the gather
  // pass appends a segment's keys next to each other (one warp load per call of its mass_of),
  // so a lane's run spans one or two segments and lanes seldom share a word, where lanes 32
  // entries apart ran the emulated 64-bit add's CAS loop on the same few words (flat top-p at
  // 128 x 128256 0.967x; history/ab-sampling-run-atomics-9d33cbc.txt). Positions and the
  // segment length fit 32 bits (rows below 2^31).
  const std::uint32_t per_lane = (gathered + 31u) / 32u;
  const std::uint32_t lo = first + (threadIdx.x & 31) * per_lane, hi = min(lo + per_lane, first + gathered);
  const std::uint32_t segment_elements = static_cast<std::uint32_t>(4 * kSegmentUnitGroups * layout.per_segment);
  const bool one_unit = layout.per_segment == 1;  // then a segment is 128 elements
  static_assert(4 * kSegmentUnitGroups == 128, "one_unit's shift");
  std::uint32_t current = 0;
  std::uint64_t run = 0;
  for (std::uint32_t i = lo; i < hi; ++i) {
    const std::uint32_t k = space.keys[i];
    if (k < min_key) continue;
    const std::uint32_t pos = space.positions[i];
    const std::uint32_t s = one_unit ? pos >> 7 : pos / segment_elements;
    if (s != current && run != 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&space.segments[current]), static_cast<unsigned long long>(run));
      run = 0;
    }
    current = s;
    run += fx.mass(k);
  }
  if (run != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&space.segments[current]), static_cast<unsigned long long>(run));
  }
  __syncthreads();
  return draw_from_segments(scope, layout, space.segments, min_key, fx, rng);
}

}  // namespace aotinfer::sampling
