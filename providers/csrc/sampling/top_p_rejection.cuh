// Top-p sampling by rejection: draw among the keys above a floor, accept the token when the
// mass above it is below the goal, else raise the floor and draw again
// (core/aotinfer/reference/sampling.py, top_p_rejection, is the definition and the oracle).
//
// The threshold search (radix_threshold.cuh) finds t_p exactly and then draws from the kept
// set: level 0, a gather pass or levels 1-2, then the draw, with a block (or cluster) barrier
// at every level. Here a round is a draw and one pass for the masses above two pivots, and
// about nine rows in ten accept the first round at top_p 0.9 (dev/top_p_rejection_rounds.py),
// which is how FlashInfer reaches its top-p times. Both give the renormalised top-p
// distribution, but not the same token for a seed, so which one a launch runs is part of the
// contract (sample_launch.cu, top_p_draws_by_rejection: by batch).
// Masses are the draw's fixed-point integers (inverse_cdf.cuh), in the unit of the row's
// largest key, so each CTA's sums add up to the same totals in any order or scope.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "fixed_point.cuh"
#include "inverse_cdf.cuh"
#include "philox.cuh"
#include "radix_threshold.cuh"

namespace aotinfer::sampling {

// Adds the masses of the group's keys above k0 and above k1 (the test's two pivots).
__device__ __forceinline__ void add_pivot_masses(const float (&v)[4], std::uint32_t k0, std::uint32_t k1,
                                                 const FixedPointScale& fx, std::uint64_t& above0,
                                                 std::uint64_t& above1) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t k = prob_key(v[j]);
    const std::uint64_t q = fx.mass(k);
    above0 += k > k0 ? q : 0;
    above1 += k > k1 ? q : 0;
  }
}

// seg = the segment masses of the keys at or above min_key, in the unit fx (the caller
// syncs before reading them).
template <typename Scope>
__device__ __forceinline__ void sum_segment_masses(const Scope& scope, const SegmentLayout& layout,
                                                   std::uint64_t* seg, std::uint32_t min_key,
                                                   const FixedPointScale& fx) {
  scope.reuse_histograms();
  segment_pass(scope, layout, seg, [&](std::int64_t, const float (&v)[4]) {
    std::uint64_t q[4];
    return group_masses(v, min_key, fx, q);
  });
}

// One token of the scope's row by rejection, for p <= 1 (p <= 0: the goal is 1, which keeps the
// largest key; p = 1, to which the caller maps NaN and p > 1: no filter, the plain draw).
// Returns what inverse_cdf_draw returns (the token in the CTA holding it, -2 in the other
// CTAs of a cluster, -1 everywhere for a row with nothing to draw).
//
// Passes over the row: round 0's segment masses, with the row's largest key found in the same
// pass (FixedPointScale::rejection_unit; a row outside its range, or without a filter, takes
// a pass for its largest key and one for the masses in that key's unit, so that p = 1 draws
// the plain sampler's token), then a test pass a round. With one CTA a row the test pass sums
// the masses above each pivot per segment, not only per row, and those are the segment masses
// of the next round's draw whichever floor the test picks (every key above k0, or above k1),
// so a rejected round draws again from shared memory alone: 128 and 512 rows took 0.73-0.81x
// the time of two passes a round after a pass for the largest key (history/
// ab-sampling-top-p-rejection-old-new-97bc595.txt). A cluster's slices lie in shared memory,
// where the per-segment sums cost more than the pass they save: without them (a plain test
// pass, a rejected round's draw summing its segments again) clusters took 0.885-0.99x the time
// at 1-64 rows (history/ab-sampling-top-p-rejection-slice-plain-rounds-7fdab70.txt). The
// draw's segments are half as many as inverse_cdf_draw's (the two arrays share its space),
// which changes no token: they only narrow the search for the element (longer segments above
// 196608 elements a CTA).
template <typename Scope, typename Sh>
__device__ std::int64_t top_p_rejection_draw(const Scope& scope, std::int64_t n, float p, const RowRandom& rng,
                                             Sh& sh) {
  constexpr int kHalf = Sh::kDrawSegments / 2;
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), kHalf);
  std::uint64_t* const above[2] = {sh.segment_mass, sh.segment_mass + kHalf};  // keys above k0, k1
  const bool filtered = p < 1.f;
  FixedPointScale fx = FixedPointScale::rejection_unit(n);
  std::uint32_t max_key = 0u;
  if (filtered) {
    scope.reuse_histograms();
    segment_pass(scope, layout, above[0], [&](std::int64_t, const float (&v)[4]) {
      std::uint64_t sum = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t k = prob_key(v[j]);  // 0 (mass 0) for non-participants
        max_key = max(max_key, k);
        sum += fx.mass(k);
      }
      return sum;
    });
    max_key = scope.reduce(max_key, MaxOp{}, 0u);  // (its barrier publishes the segments)
  } else {
    max_key = largest_key(scope);
  }
  if (max_key == 0u) return -1;
  if (!filtered || !FixedPointScale::rejection_unit_holds(max_key, n)) {
    fx = FixedPointScale::of(max_key, n);
    sum_segment_masses(scope, layout, above[0], 1u, fx);
  }
  // (After the fused pass the reduction's barriers already order the masses; without this one
  // ptxas gave the row kernels a 128 B stack frame instead of 16.)
  __syncthreads();
  std::uint32_t min_key = 1u;  // keys above the floor: every participant at first
  const std::uint64_t* seg = above[0];  // the segment masses of the keys at or above min_key
  float high = __uint_as_float(max_key);
  std::uint64_t goal = 0;
  for (int round = 0;; ++round) {
    std::uint64_t total = 0;
    std::uint32_t drawn = 0u;
    const std::int64_t token = draw_from_segments(scope, layout, seg, min_key, fx, rng, round, &total, &drawn);
    // The mass above the drawn key is below the total (the drawn key's own is positive), so a
    // row without a filter (goal: the total) accepts round 0 without the test pass.
    if (!filtered) return token;
    if (round == 0) goal = mass_goal(p, total);  // total > 0: the row has a participant
    // The drawn key, in every CTA of a cluster (the others' drawn is 0). The draw's last
    // barrier follows its reads of seg, which the test pass overwrites.
    const std::uint32_t k0 = Scope::kSplitOverCluster ? scope.reduce(drawn, MaxOp{}, 0u) : drawn;
    const float v1 = __fmul_rn(__fadd_rn(__uint_as_float(k0), high), 0.5f);
    const std::uint32_t k1 = __float_as_uint(v1);
    std::uint64_t above0 = 0, above1 = 0;
    if constexpr (Scope::kSplitOverCluster) {
      scope.for_each_group(0.f, [&](std::int64_t, const float (&v)[4]) {
        add_pivot_masses(v, k0, k1, fx, above0, above1);
      });
    } else {  // and per segment: the next round's segment masses
      segment_pass_sums<2>(scope, layout, above, [&](std::int64_t, const float (&v)[4], std::uint64_t (&m)[2]) {
        m[0] = m[1] = 0;
        add_pivot_masses(v, k0, k1, fx, m[0], m[1]);
        above0 += m[0];
        above1 += m[1];
      });
      __syncthreads();  // the segment masses are written
    }
    if (scope.reduce(above0, SumOp{}, std::uint64_t{0}) < goal) return token;
    // Rejected: every key at or below k0 is outside the top-p set. The second pivot's mass
    // is exchanged only now (about one round in ten).
    if (scope.reduce(above1, SumOp{}, std::uint64_t{0}) < goal) {
      min_key = k0 + 1u;  // and every key above k1 is inside it
      high = v1;
      seg = above[0];
    } else {
      min_key = k1 + 1u;
      seg = above[1];
    }
    if constexpr (Scope::kSplitOverCluster) {  // the test pass summed no segments
      seg = above[0];
      sum_segment_masses(scope, layout, above[0], min_key, fx);
      __syncthreads();
    }
  }
}

}  // namespace aotinfer::sampling
