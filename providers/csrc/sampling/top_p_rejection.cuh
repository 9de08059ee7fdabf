// Top-p sampling by rejection: draw among the keys above a floor, accept the token when the
// mass above it is below the goal, else raise the floor and draw again
// (core/aotinfer/reference/sampling.py, top_p_rejection, is the definition and the oracle).
//
// The threshold search (radix_threshold.cuh) finds t_p exactly and then draws from the kept
// set: level 0, a gather pass or levels 1-2, then the draw, with a block (or cluster) barrier
// at every level. Here a round is two passes, the draw and the masses above two pivots, and
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

// The key of the token a draw returned, in every thread of the scope: the CTA holding it
// (token >= 0) reads it from its slice or row, the others (-2) add nothing.
template <typename Scope>
__device__ std::uint32_t drawn_key(const Scope& scope, std::int64_t token) {
  std::uint32_t key = 0u;
  if (token >= 0 && threadIdx.x == 0) {
    float v[4];
    scope.load(token / 4 - scope.first_group(), v);
    key = prob_key(v[token % 4]);
  }
  return scope.reduce(key, MaxOp{}, 0u);
}

// One token of the scope's row by rejection, for p <= 1 (p <= 0: the goal is 1, which keeps the
// largest key; p = 1, to which the caller maps NaN and p > 1: the goal is the row's total, so
// round 0, the unfiltered draw, is accepted). Returns what inverse_cdf_draw
// returns (the token in the CTA holding it, -2 in the other CTAs of a cluster, -1 everywhere
// for a row with nothing to draw).
template <typename Scope, typename Sh>
__device__ std::int64_t top_p_rejection_draw(const Scope& scope, std::int64_t n, float p, const RowRandom& rng,
                                             Sh& sh) {
  const std::uint32_t max_key = largest_key(scope);
  if (max_key == 0u) return -1;
  const FixedPointScale fx = FixedPointScale::of(max_key, n);
  std::uint32_t min_key = 1u;  // keys above the floor: every participant at first
  float high = __uint_as_float(max_key);
  std::uint64_t goal = 0;
  for (int round = 0;; ++round) {
    std::uint64_t total = 0;
    const std::int64_t token = inverse_cdf_draw(scope, n, min_key, max_key, rng, sh, round, &total);
    if (round == 0) goal = mass_goal(p, total);  // total > 0: the row has a participant
    const std::uint32_t k0 = drawn_key(scope, token);
    const float v1 = __fmul_rn(__fadd_rn(__uint_as_float(k0), high), 0.5f);
    const std::uint32_t k1 = __float_as_uint(v1);
    std::uint64_t above0 = 0, above1 = 0;
    scope.for_each_group(0.f, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t k = prob_key(v[j]);
        const std::uint64_t q = fx.mass(k);
        above0 += k > k0 ? q : 0;
        above1 += k > k1 ? q : 0;
      }
    });
    if (scope.reduce(above0, SumOp{}, std::uint64_t{0}) < goal) return token;
    // Rejected: every key at or below k0 is outside the top-p set. The second pivot's mass
    // is exchanged only now (about one round in ten).
    if (scope.reduce(above1, SumOp{}, std::uint64_t{0}) < goal) {
      min_key = k0 + 1u;  // and every key above k1 is inside it
      high = v1;
    } else {
      min_key = k1 + 1u;
    }
  }
}

}  // namespace aotinfer::sampling
