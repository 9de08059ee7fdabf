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
// contract (sample_launch.cu, top_p_draws_by_rejection: rejection unless pinned otherwise).
// Masses are the draw's fixed-point integers (inverse_cdf.cuh), in the unit of the row's
// largest key, so each CTA's sums add up to the same totals in any order or scope.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_reduce.cuh"
#include "fixed_point.cuh"
#include "inverse_cdf.cuh"
#include "lab_row_trace.cuh"
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

// The binned test (row kernels only, where sample_launch.cu's rejection_test_binned says).
// Round 0's pass also counts its keys and sums their fractions in bins of a key's exponent and
// three mantissa bits (2048 bins, two shared-memory atomics a key, as the searches' level 0
// pays three); a round's test then bounds the masses above both pivots from those bins and
// takes the exact test pass only where the bounds leave the answer open: the drawn key in the
// bin where the goal falls (a bin spans 1/8 of a binade: at top_p 0.9 about 1.2% of the mass
// of the benchmark's flat rows, 0.4-6.5% of its peaked ones, by a CPU estimate; dev/NOTES.md
// item 73). A round decided by the bins reads the row again only when it rejects (for the next
// draw's segment masses), so most rows read it once instead of twice. The decisions, so the
// tokens, are the exact test's (tests/cpu/test_rejection_bins.py repeats the bounds' integer
// steps and checks that they hold).
struct RejectionBins {
  static constexpr int kShift = 20;                  // key >> kShift: exponent, 3 mantissa bits
  static constexpr int kBins = 1 << (31 - kShift);   // keys of participants have sign bit 0
  std::uint32_t count[kBins + 1];  // + the sink of non-participants (no scan reads it)
  std::uint32_t fraction[kBins];   // sums of (key's 23-bit fraction) >> fraction_shift
  // Chunks of kChunkBins bins. Once round 0's bins are complete, chunk_lo / chunk_hi[c] bound
  // the mass of every bin from chunk c up (kChunks: none; build_tables), so that a round's
  // test (bin_bounds_above) adds the bounds of one chunk's bins to one table entry, in every
  // warp at once, instead of a block reduction over every bin with two barriers a round.
  // The width changes no bound (the same integers as a sum over every bin), only the test's
  // cost: four bins a chunk (8 KB of tables, 50.7 KB of static shared memory in all) where
  // ptxas takes more than 48 KB of it (sm_90a, sm_100a, sm_110a: on the H200 the row kernels'
  // top-p took 0.982-0.999x the time of eight at 128 and 512 rows, history/
  // ab-sampling-chunk-bins-4-8-46164c6.txt), eight (4 KB, 46.5 KB in all) for the 48 KB of
  // sm_75 to sm_89 and sm_120 (ptxas refused 0xc5f0 bytes there). Shared memory only, so
  // host code never sizes this struct.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
  static constexpr int kChunkBins = 4;
#else
  static constexpr int kChunkBins = 8;
#endif
  static constexpr int kChunks = kBins / kChunkBins;
  std::uint64_t chunk_lo[kChunks + 1], chunk_hi[kChunks + 1];
  // The fractions' shift for rows of n elements: a bin's sum stays below 2^32 (n < 2^(9 +
  // shift)), and each element's truncation loses less than 2^(shift - 23) of its mantissa.
  __device__ __forceinline__ static int fraction_shift(std::int64_t n) {
    const int bits = 64 - __clzll(static_cast<long long>(n > 0 ? n : 1));
    return bits > 9 ? bits - 9 : 0;
  }
  __device__ __forceinline__ void clear() {
    for (int i = threadIdx.x; i <= kBins; i += blockDim.x) {
      count[i] = 0u;
      if (i < kBins) fraction[i] = 0u;
    }
  }
  // Branch-free as the searches' level 0 (radix_threshold.cuh, add_to_level0): a
  // non-participant (key 0) counts in the sink and adds its fraction of 0 to bin `lane`.
  __device__ __forceinline__ void add(std::uint32_t k, int shift) {
    atomicAdd(&count[k != 0u ? k >> kShift : static_cast<std::uint32_t>(kBins)], 1u);
    atomicAdd(&fraction[k != 0u ? k >> kShift : (threadIdx.x & 31u)], (k & 0x7FFFFFu) >> shift);
  }
  // Bounds on the fixed-point mass (fx) of bin b's keys: the exact sum of per-key floors lies
  // in [lo, hi]. The mantissas' sum is known to within count * 2^shift (the truncated
  // fractions); where fx shifts right, each key's floor loses less than 1 more.
  __device__ __forceinline__ void bounds(int b, const FixedPointScale& fx, int shift, std::uint64_t& lo,
                                         std::uint64_t& hi) const {
    const std::uint64_t c = count[b];
    if (c == 0) {  // (and no shift beyond 63 for the empty bins above the row's largest key)
      lo = hi = 0;
      return;
    }
    const int field = b >> (23 - kShift);
    const std::uint64_t implicit = field > 0 ? c << 23 : 0;
    const std::uint64_t m_lo = (static_cast<std::uint64_t>(fraction[b]) << shift) + implicit;
    const std::uint64_t m_hi = m_lo + c * ((std::uint64_t{1} << shift) - 1);
    const int s = (field > 0 ? field : 1) + fx.base;
    if (s >= 0) {
      lo = m_lo << s;
      hi = m_hi << s;
    } else {
      const std::uint64_t f = shifted_mass(m_lo, s);
      lo = f > c ? f - c : 0;
      hi = shifted_mass(m_hi, s);
    }
  }
  // The chunk tables, by every thread of a CTA of at least kChunks threads (the binned
  // kernels have 512 or 1024; sample_kernel asserts it), after a barrier that follows the
  // last add. Thread t sums the
  // bounds of chunk kChunks - 1 - t, so that the block's prefix sums in thread order are the
  // sums from the top chunk down. Ends with a barrier.
  __device__ void build_tables(const FixedPointScale& fx, int shift) {
    const int c = kChunks - 1 - static_cast<int>(threadIdx.x);
    std::uint64_t lo = 0, hi = 0;
    if (c >= 0) {
#pragma unroll
      for (int j = 0; j < kChunkBins; ++j) {
        std::uint64_t l, h;
        bounds(c * kChunkBins + j, fx, shift, l, h);
        lo += l;
        hi += h;
      }
    }
    std::uint64_t before_lo, before_hi, total_lo, total_hi;
    block_exclusive_scan_pair(lo, hi, &before_lo, &before_hi, &total_lo, &total_hi);
    if (c >= 0) {
      chunk_lo[c] = before_lo + lo;
      chunk_hi[c] = before_hi + hi;
    }
    if (threadIdx.x == 0) chunk_lo[kChunks] = chunk_hi[kChunks] = 0;
    __syncthreads();
  }
};

// Bounds on the masses above two keys: lo[i] <= (the mass of the keys above key[i]) <= hi[i].
// own[i]: the mass of one key equal to key[i] that the row holds (the drawn key's), 0 if none
// is known; it is not above key[i].
struct AboveBounds {
  std::uint64_t lo[2], hi[2];
};

// AboveBounds from the bins (after build_tables), by every whole warp alone, no barrier:
// lanes 0 to kChunkBins - 1 take the bins of key[0]'s chunk, the next kChunkBins those of
// key[1]'s, and each key's sums add the table entry of the chunks above. The same integers
// as a sum over every bin.
__device__ __forceinline__ AboveBounds bin_bounds_above(const RejectionBins& bins, const std::uint32_t (&key)[2],
                                                        const std::uint64_t (&own)[2], const FixedPointScale& fx,
                                                        int shift) {
  constexpr int kC = RejectionBins::kChunkBins;
  static_assert(2 * kC <= 32 && (kC & (kC - 1)) == 0, "both keys' chunks in one warp, aligned groups");
  const int lane = threadIdx.x & 31, i = (lane / kC) & 1;
  const int kb = static_cast<int>(key[i] >> RejectionBins::kShift), b = kb - kb % kC + lane % kC;
  std::uint64_t lo = 0, hi = 0;
  if (lane < 2 * kC) {
    std::uint64_t l, h;
    bins.bounds(b, fx, shift, l, h);
    if (b > kb) {
      lo = l;
      hi = h;
    } else if (b == kb) {
      hi = h - own[i];  // the keys above key[i] in its own bin: at most the rest
    }
  }
#pragma unroll
  for (int m = 1; m < kC; m <<= 1) {
    lo += __shfl_xor_sync(kFullMask, lo, m);
    hi += __shfl_xor_sync(kFullMask, hi, m);
  }
  AboveBounds r;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int above_chunk = static_cast<int>(key[k] >> RejectionBins::kShift) / kC + 1;
    r.lo[k] = __shfl_sync(kFullMask, lo, k * kC) + bins.chunk_lo[above_chunk];
    r.hi[k] = __shfl_sync(kFullMask, hi, k * kC) + bins.chunk_hi[above_chunk];
  }
  return r;
}

// The binned test's shared memory, in the kernels that call it.
__device__ __forceinline__ RejectionBins& rejection_bins() {
  __shared__ RejectionBins bins;
  return bins;
}

// In a cluster, round 0 draws before the row's largest key is known: the CTAs' largest keys
// ride in the draw's push of the CTAs' totals, so a row pays one cluster barrier fewer (the
// largest key's reduce()): 0.957-0.995x the time at 1 and 16 rows of 32000 and 128256
// (history/ab-sampling-top-p-fused-max-push-cd92c25.txt). Where the rejection unit does not
// hold for the row (rare: rows not summing to about 1), that draw is not searched and round 0
// draws again in the row's unit, as before. The same token either way. This is that draw's
// step across the cluster: the CTAs' totals and largest keys in one push; search only where
// the rejection unit holds for the row's largest key.
struct TotalsAndLargestKey {
  std::uint32_t* max_key;  // this CTA's in, the row's out
  std::int64_t n;
  template <typename Scope>
  __device__ bool operator()(const Scope& scope, std::uint64_t cta_total, std::uint64_t* before,
                             std::uint64_t* total) const {
    scope.exclusive_across(cta_total, before, total, max_key);
    return *max_key != 0u && FixedPointScale::rejection_unit_holds(*max_key, n);
  }
};

// Whether a scope's test sums the masses above both pivots by per-warp pushes and one exchange
// (SliceScopeOf::sum_pair_by_warps) instead of reduce()'s block reduction and exchange (and a
// second reduce for the second pivot after a rejection): in clusters of 4 only. Measured when
// both exchanges were cluster barriers, on an H100 in every cluster size (graph us, A B A B in
// one machine start, the same tokens; history/ab-sampling-rejection-warp-push-b467728-
// h100.txt): clusters of 4 (16 x 32000) 0.949-0.960x, of 8 1.025-1.028x at 1 x 32000 and
// 0.989-0.990x at 16 x 128256, of 16 (1 x 128256) 1.051-1.061x: each CTA reads kCtas x 16
// slots and every warp pushes to kCtas peers, which the two block barriers saved pay for only
// in the smallest clusters. Measured again once both became cluster_push.cuh exchanges
// (block sums as lab AOTINFER_LAB_REJECTION_BLOCK_SUMS, session 62; H100, A B A B, the same
// tokens; history/ab-sampling-rejection-block-sums-032b6ab-h100.txt): 16 x 32000 1.008-1.012x,
// 64 x 32000 0.989-0.993x, a wash, so the per-warp pushes stay.
template <typename Scope>
constexpr bool test_sums_by_warp_pushes() {
  if constexpr (Scope::kSplitOverCluster) {
    return Scope::kClusterCtas == 4;
  } else {
    return false;
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
// pass (FixedPointScale::rejection_unit; a row outside its range takes a second pass for the
// masses in its largest key's unit; p = 1 returns round 0's token, plain sampling's, which
// takes the same unit: reference "Drawing"), then a test pass a round (kBinnedTest: only in a
// round its bins leave open, and a pass for the next draw's segment masses after a round they
// reject; RejectionBins). With one CTA a row the test pass sums the masses above each pivot per
// segment, not only per row, and those are the segment masses of the next round's draw
// whichever floor the test picks (every key above k0, or above k1), so a round it rejects
// draws again from shared memory alone: 128 and 512 rows took 0.73-0.81x
// the time of two passes a round after a pass for the largest key (history/
// ab-sampling-top-p-rejection-old-new-97bc595.txt). A cluster's slices lie in shared memory,
// where the per-segment sums cost more than the pass they save: without them (a plain test
// pass, a rejected round's draw summing its segments again) clusters took 0.885-0.99x the time
// at 1-64 rows (history/ab-sampling-top-p-rejection-slice-plain-rounds-7fdab70.txt). The
// draw's segments are half as many as inverse_cdf_draw's (the two arrays share its space),
// which changes no token: they only narrow the search for the element (longer segments above
// 196608 elements a CTA).
template <bool kBinnedTest = false, typename Scope, typename Sh>
__device__ std::int64_t top_p_rejection_draw(const Scope& scope, std::int64_t n, float p, const RowRandom& rng,
                                             Sh& sh) {
  static_assert(!kBinnedTest || !Scope::kSplitOverCluster, "the binned test serves the row kernels");
  constexpr int kHalf = Sh::kDrawSegments / 2;
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), kHalf);
  std::uint64_t* const above[2] = {sh.segment_mass, sh.segment_mass + kHalf};  // keys above k0, k1
  const bool filtered = p < 1.f;
  LAB_TRACE(LabRowTrace trace; trace.start());
  FixedPointScale fx = FixedPointScale::rejection_unit(n);
  std::uint32_t max_key = 0u;
  // The bins' shared memory only in the kernels that test by them.
  RejectionBins* bins = nullptr;
  if constexpr (kBinnedTest) bins = &rejection_bins();
  [[maybe_unused]] const int fraction_shift = RejectionBins::fraction_shift(n);
  constexpr bool kSpeculativeRound0 = Scope::kSplitOverCluster;
  std::int64_t first_token = kDrawNotSearched;  // a cluster's round 0, where it searched
  std::uint64_t first_total = 0;
  std::uint32_t first_drawn = 0u;
  // Round 0's pass: the masses in the fixed unit and the row's largest key at once, for rows
  // without a filter too (plain sampling draws here: one pass over the row where the own
  // unit's draw took two); the bins only where a test may follow, by a second instance of the
  // pass rather than a test of `filtered` per key.
  auto pass0 = [&](auto with_bins) {
    scope.reuse_histograms();
    segment_pass(scope, layout, above[0], [&](std::int64_t, const float (&v)[4]) {
      std::uint64_t sum = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t k = prob_key(v[j]);  // 0 (mass 0) for non-participants
        max_key = max(max_key, k);
        sum += fx.mass(k);
        if constexpr (decltype(with_bins)::value) bins->add(k, fraction_shift);
      }
      return sum;
    });
  };
  if constexpr (kBinnedTest) {
    if (filtered) {
      bins->clear();
      pass0(std::true_type{});
    } else {
      pass0(std::false_type{});
    }
  } else {
    pass0(std::false_type{});
  }
  if constexpr (kSpeculativeRound0) {
    LAB_SLICE(lab_slice_mark(kLabRejectionPass0));
    max_key = block_reduce(max_key, MaxOp{}, 0u);  // this CTA's (its barriers publish the segments)
    first_token = draw_from_segments(scope, layout, above[0], 1u, fx, rng, 0, &first_total, &first_drawn,
                                     TotalsAndLargestKey{&max_key, n});
    LAB_SLICE(lab_slice_mark(kLabRejectionDraw0));
  } else {
    max_key = scope.reduce(max_key, MaxOp{}, 0u);  // (its barrier publishes the segments)
  }
  LAB_TRACE(trace.mark_pass0());
  if (max_key == 0u) return -1;
  if (!FixedPointScale::rejection_unit_holds(max_key, n)) {
    fx = FixedPointScale::of(max_key, n);
    sum_segment_masses(scope, layout, above[0], 1u, fx);
  }
  // (After the fused pass the reduction's barriers already order the masses; without this one
  // ptxas gave the row kernels a 128 B stack frame instead of 16.)
  __syncthreads();
  if constexpr (kBinnedTest) {
    if (filtered) bins->build_tables(fx, fraction_shift);
  }
  std::uint32_t min_key = 1u;  // keys above the floor: every participant at first
  const std::uint64_t* seg = above[0];  // the segment masses of the keys at or above min_key
  float high = __uint_as_float(max_key);
  std::uint64_t goal = 0;
  for (int round = 0;; ++round) {
    LAB_TRACE(trace.mark_round(round));
    std::uint64_t total = first_total;
    std::uint32_t drawn = first_drawn;
    const std::int64_t token = kSpeculativeRound0 && round == 0 && first_token != kDrawNotSearched
                                   ? first_token
                                   : draw_from_segments(scope, layout, seg, min_key, fx, rng, round, &total, &drawn);
    // The mass above the drawn key is below the total (the drawn key's own is positive), so a
    // row without a filter (goal: the total) accepts round 0 without the test pass.
    if (!filtered) return token;
    if (round == 0) goal = mass_goal(p, total);  // total > 0: the row has a participant
    // The drawn key, in every CTA of a cluster (the others' drawn is 0; the same in every
    // thread of a CTA). The draw's last barrier follows its reads of seg, which the test pass
    // overwrites.
    const std::uint32_t k0 = scope.reduce_uniform(drawn, MaxOp{});
    LAB_SLICE(if (Scope::kSplitOverCluster && round == 0) lab_slice_mark(kLabRejectionPivot0));
    const float v1 = __fmul_rn(__fadd_rn(__uint_as_float(k0), high), 0.5f);
    const std::uint32_t k1 = __float_as_uint(v1);
    // A rejected round: every key at or below k0 is outside the top-p set, and so is every key
    // at or below k1 when the keys above k1 still hold the goal; else every key above k1 is
    // inside it, and k1 becomes the next midpoint's upper end.
    auto raise_floor = [&](bool k1_out) {
      if (k1_out) {
        min_key = k1 + 1u;
      } else {
        min_key = k0 + 1u;
        high = v1;
      }
    };
    // The next draw's segment masses, by a pass of their own.
    auto sum_segments_above_floor = [&] {
      seg = above[0];
      sum_segment_masses(scope, layout, above[0], min_key, fx);
      __syncthreads();
    };
    if constexpr (kBinnedTest) {
      const AboveBounds bound = bin_bounds_above(*bins, {k0, k1}, {fx.mass(k0), 0}, fx, fraction_shift);
      if (bound.hi[0] < goal) {
        LAB_TRACE(trace.finish(round + 1));
        return token;
      }
      // Rejected, and the floor known: the next draw's segment masses take a pass of their own.
      const bool rejected = bound.lo[0] >= goal;
      if (rejected && (bound.hi[1] < goal || bound.lo[1] >= goal)) {
        raise_floor(bound.lo[1] >= goal);
        sum_segments_above_floor();
        LAB_TRACE(++trace.settled);
        continue;
      }
    }
    // The exact test pass.
    LAB_TRACE(++trace.exact);
    std::uint64_t above0 = 0, above1 = 0;
    if constexpr (Scope::kSplitOverCluster) {
      scope.for_each_group(0.f, [&](std::int64_t, const float (&v)[4]) {
        add_pivot_masses(v, k0, k1, fx, above0, above1);
      });
      LAB_SLICE(if (round == 0) lab_slice_mark(kLabRejectionTest0));
    } else {  // and per segment: the next round's segment masses
      segment_pass_sums<2>(scope, layout, above, [&](std::int64_t, const float (&v)[4], std::uint64_t (&m)[2]) {
        m[0] = m[1] = 0;
        add_pivot_masses(v, k0, k1, fx, m[0], m[1]);
        above0 += m[0];
        above1 += m[1];
      });
      __syncthreads();  // the segment masses are written
    }
    constexpr bool kPushed = test_sums_by_warp_pushes<Scope>();  // (both pivots' sums at once)
    if constexpr (kPushed) scope.sum_pair_by_warps(above0, above1, &above0, &above1);
    const bool accepted = (kPushed ? above0 : scope.reduce(above0, SumOp{}, std::uint64_t{0})) < goal;
    LAB_SLICE(if (Scope::kSplitOverCluster && round == 0) lab_slice_mark(kLabRejectionTested0));
    if (accepted) {
      LAB_TRACE(trace.finish(round + 1));
      return token;
    }
    // Rejected. Unless pushed with the first, the second pivot's mass is exchanged only now
    // (about one round in ten).
    const bool k1_out = (kPushed ? above1 : scope.reduce(above1, SumOp{}, std::uint64_t{0})) >= goal;
    raise_floor(k1_out);
    if constexpr (Scope::kSplitOverCluster) {  // the test pass summed no segments
      sum_segments_above_floor();
    } else {
      seg = above[k1_out ? 1 : 0];
    }
  }
}

}  // namespace aotinfer::sampling
