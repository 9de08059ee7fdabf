// The cluster top-k sampler of rows below kLocalTopKMaxVocab (session 30, dev/NOTES.md item
// 62): one cluster-wide exchange instead of a cluster-wide search.
//
// The cluster kernels' search levels each cost cluster barriers (~4.5 us a level at batch 1
// against ~0.4 us of pass work per CTA, row_scope.cuh). Here every CTA finds a bound t_c at
// most the k-th largest key of its own slice with block barriers only (local_top_k_key) and
// pushes its keys >= t_c, in row order, into its region of rank 0's list. That union holds
// every key of the row's top-k set: a key x >= t_k (the row's k-th largest) has fewer than k
// larger keys in the row, so fewer than k in its slice, so x >= t_c. Rank 0 then finds t_k in
// the list (the same k-th largest key: the list is a part of the row that holds its top k)
// and draws from it: the list is in row order and holds every kept key, so the inverse CDF
// over it (the same integer masses, the same target) gives the token the whole row would. A
// region that overflows (ties: k values crowd a slice) sends every CTA back to the
// cluster-wide search.
//
// Measured against the cluster-wide search (A B A B, graph us; history/
// ab-sampling-cluster-local-top-k-063f4e1fa.txt): vocab 32000, batch 1 0.857 / 0.874 (flat /
// peaked; 15.1 -> 12.9 us flat), batch 16 0.838 / 0.842, with t_c the slice's exact k-th
// largest key; but vocab 128256 1.032-1.062 (16032 elements a slice: the local search's three
// passes and the listing pass cost more there than the cluster levels they replace), so the
// path served only rows below 65536 until session 32 (dev/NOTES.md item 64). Then the local
// search learned to stop as soon as its bound fits the region: 0.83-0.85x more at vocab 32000
// (top-k 1 x 32000 peaked 13.2 -> 10.9 us), and the path now pays at 128256 too: top-k
// 0.87-0.90x, joint 0.87-0.94x against the cluster-wide search at 1 and 16 rows
// (history/ab-sampling-local-bound-*.txt, ab-sampling-list-large-vocab-ddd57aea0.txt).
//
// Top-k then top-p, and joint top-k / top-p (session 31, dev/NOTES.md items 63-64), draw from
// the same list: the top-p set within the top-k set is found in the list too
// (two_search_list_filter). Joint's goal is a fraction of the row's total mass, which rank 0
// bounds from the slices' sums; a row whose kept set those bounds cannot decide, rank 0 sums
// exactly from the row in global memory (session 32: before, the whole cluster went back to
// the cluster-wide search, every peer waiting for rank 0's verdict). Joint at 16 x 32000
// against the cluster-wide search, the three A/Bs multiplied: 0.77x peaked, 0.89x flat; at
// one row 0.90x (history/ab-sampling-local-joint-*.txt, ab-sampling-joint-no-verdict-*,
// ab-sampling-local-bound-*).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "filter_sample.cuh"
#include "lab_row_trace.cuh"
#include "level0_count_bound.cuh"
#include "row_scope.cuh"
#include "top_k_set_in_warp.cuh"
#include "warp_bitonic.cuh"

namespace aotinfer::sampling {

// Rows from this length on keep the cluster-wide search. Up to 2^18, joint's slack
// (two_search_list_filter) holds for the slices' 2^15 floats; the launcher also checks that
// the slice fits beside the list kernels' static shared memory (local_list_static_smem).
constexpr std::int64_t kLocalTopKMaxVocab = 262144;
// Each CTA's region of rank 0's list; the path runs for k up to half of it.
constexpr int kLocalListRegion = 128;
template <int kCtas>
constexpr int kLocalListEntries = kCtas * kLocalListRegion;
// The list kernels' static shared memory: RadixShared, the list (8 KB of 1024 entries in
// clusters of 8, 16 KB of 2048 in clusters of 16, 4 KB of 512 in clusters of 4) and scratch
// (sm_90a, ptxas -v, session 51: top-k / two-search kernels 37408 / 40576 B in clusters of 8,
// 44384 / 46320 in clusters of 16, 36224 / 39360 in clusters of 4; joint's WarpSet and token
// take 1.3 KB in clusters of 4 and 8), rounded up: the two-search kernels of 8 are 384 B short
// of the bound, so a change that adds static shared memory there must raise it.
constexpr std::int64_t local_list_static_smem(int ctas) { return ctas > kSliceCtas ? 48 * 1024 : 40 * 1024; }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Groups of floats in shared memory (a CTA's slice, or rank 0's list of keys) with the
// block-level reductions of RowScope: a search over them needs no cluster barrier.
// kFinish: count searches end in one warp once a crossing bin holds at most 32 keys
// (radix_threshold.cuh's finish_in_warp; session 33, dev/NOTES.md item 65): the top-k sampler's
// (0.91-0.95x at 1 and 16 x 32000). The two-search kernels keep the levels: there the finish
// served only the slices' searches and cost the list kernel spills, 1.01-1.03x
// (history/ab-sampling-no-warp-finish-d9e359b7e.txt).
template <bool kFinish>
struct LocalScope : RowScope<float, GatherMode::kOff, false>, SharedGroups {
  __device__ LocalScope(const float4* data, std::int64_t count, std::int64_t first_group)
      : RowScope<float, GatherMode::kOff, false>(nullptr, 4 * count), SharedGroups{data, count, first_group} {}
  // The data's access is SharedGroups', the reductions RowScope's.
  using SharedGroups::first_group;
  using SharedGroups::for_each_group;
  using SharedGroups::load;
  using SharedGroups::load_whole;
  using SharedGroups::local_groups;
  using SharedGroups::next_pass_descending;
  using SharedGroups::whole_local_groups;
  static constexpr bool kFinishesInWarp = kFinish;
};

namespace detail {

// The top-k threshold key of a scope's probabilities by count (0: fewer than k take part).
// With `enough` (SearchTarget::enough) a bound instead, at most that key: the search stops at
// the first level where the keys >= the crossing bin's lowest number at most `enough`.
template <typename Scope, typename Sh>
__device__ std::uint32_t local_top_k_key(const Scope& scope, std::int32_t k, Sh& sh, std::uint64_t enough = 0) {
  auto key_of = [](float v) { return prob_key(v); };
  SearchTarget target{false, static_cast<std::uint64_t>(k), 0.f, 0, false};
  target.enough = enough;
  return radix_threshold(scope, key_of, target, sh).key;
}

// The list in rank 0 (keys as floats, 0 for an empty entry) as a scope of its own (the
// two-search filter's masses searches; list_top_k sorts it instead).
template <int kCtas>
__device__ __forceinline__ LocalScope<false> local_list_scope(const float* keys) {
  return LocalScope<false>(reinterpret_cast<const float4*>(keys), kLocalListEntries<kCtas> / 4, 0);
}

// Rank 0 finds t_k in the list by sorting networks (session 55, dev/NOTES.md item 87): each
// warp sorts 64 keys (two a lane) by a bitonic network in registers; pairs of warps then keep
// the larger 64 of their two lists (the elementwise larger of one list and the other reversed
// is a bitonic sequence that holds them; six more steps sort it), through shared memory, until
// warp 0 holds the list's 64 largest keys in order. The k-th of them (k <= kLocalListRegion / 2
// = 64) is t_k: the kept set of the radix search's key (no list key lies between the two).
// The search it replaced (local_top_k_key over the list) paid block barriers at each level and
// a one-warp scan of the list; rank 0's draw, t_k included, took ~7.7k of a top-k call's ~18.5k
// cycles at 1 x 32000 (H100; history/trace-slice-phases-f00efa8-h100.txt, dev/
// trace_slice_phases.py). Measured as lab AOTINFER_LAB_LIST_BITONIC_TOP_K (H100, A B A B in one
// machine start, the same tokens, the 757 sampling tests passing under it; history/
// ab-sampling-list-bitonic-top-k-eebabab-h100.txt): at 1, 4 and 16 rows of 32000 top-k
// 0.84-0.92x, joint 0.86-0.93x (1 x 32000 peaked 10.8 -> 9.85 us), top-k then top-p 0.88-0.94x;
// at 16 rows of 128256 0.91-0.98x; at 1 and 4 rows of 128256 (clusters of 16) flat rows top-k
// 0.92x and top-k then top-p 0.95-0.96x, the rest 0.995-1.006x (joint there keeps the two
// searches with masses; why peaked and sharp rows gained nothing there is not measured).
// The networks: warp_bitonic.cuh.
//
// The sort also yields the list's largest key (warp 0's element 0), which the draws after it
// (draw_from_local_list_block for the top-k sampler, joint_top_k_set_draw) take instead of a
// block reduction over the list's entries (two block barriers and a read of every entry); the
// same key, so the same unit and token (dev/model_list_sorting.py checks element 0). Measured
// as lab AOTINFER_LAB_LIST_LARGEST (session 57, H100, A B A B in one machine start, the same
// tokens, the 757 sampling tests passing under it; history/ab-sampling-list-largest-5386537-
// h100.txt): top-k 0.968-0.983x and joint 0.978-0.986x at 1-16 rows of 32000 (joint 1 x 32000
// peaked 9.9 -> 9.7 us), top-k 0.973-0.992x at 1-16 rows of 128256, the rest 0.994-1.001x.

// Rank 0's top-k threshold key of the row from its list (0: fewer than k keys take part), and
// the list's largest key (0: the list is empty).
struct ListTopK {
  std::uint32_t key;
  std::uint32_t largest;
};
template <int kCtas, typename Sh>
__device__ ListTopK list_top_k(const float* keys, std::int32_t k, Sh& sh) {
  constexpr int kChunks = kLocalListEntries<kCtas> / 64;
  constexpr int kWarps = kSliceThreads / 32;
  constexpr int kLists = kChunks < kWarps ? kChunks : kWarps;  // sorted lists after the warps' own merges
  static_assert(kChunks % kLists == 0 && (kLists & (kLists - 1)) == 0, "whole chunks, lists in pairs");
  static_assert(kLists / 2 * 64 * 2 < Sh::kBins, "two exchange buffers in sh.count, and the largest key");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  std::uint32_t* exchange = sh.count;  // free here: the slice's searches are over
  std::uint32_t a[2] = {0u, 0u};
  if (warp < kLists) {
#pragma unroll
    for (int c = warp; c < kChunks; c += kLists) {
      std::uint32_t b[2] = {prob_key(keys[c * 64 + lane]), prob_key(keys[c * 64 + 32 + lane])};
#pragma unroll
      for (int len = 2; len <= 64; len <<= 1) {
#pragma unroll
        for (int j = len >> 1; j > 0; j >>= 1) warp_bitonic_step(b, len, j);
      }
      if (c == warp) {
        a[0] = b[0];
        a[1] = b[1];
      } else {
        // b's element e sits in lane e % 32, register e / 32: a shuffle reads it.
        warp_keep_larger_64(a, [&](int e) {
          const std::uint32_t lo = __shfl_sync(kFullMask, b[0], e & 31), hi = __shfl_sync(kFullMask, b[1], e & 31);
          return e < 32 ? lo : hi;
        });
      }
    }
  }
  int buffer = 0;
#pragma unroll
  for (int lists = kLists; lists > 1; lists >>= 1) {
    const int half = lists >> 1;
    std::uint32_t* slots = exchange + buffer * (kLists / 2 * 64);
    if (warp >= half && warp < lists) {
      slots[(warp - half) * 64 + lane] = a[0];
      slots[(warp - half) * 64 + 32 + lane] = a[1];
    }
    __syncthreads();
    if (warp < half) warp_keep_larger_64(a, [&](int e) { return slots[warp * 64 + e]; });
    buffer ^= 1;
  }
  // Warp 0 holds the 64 largest in order: the k-th is element k - 1.
  if (warp == 0) {
    const int e = k - 1;
    const std::uint32_t v = __shfl_sync(kFullMask, e < 32 ? a[0] : a[1], e & 31);
    if (lane == 0) {
      sh.count[Sh::kBins] = v;
      sh.count[Sh::kBins - 1] = a[0];  // (beyond the exchange buffers)
    }
  }
  __syncthreads();
  const ListTopK found{sh.count[Sh::kBins], sh.count[Sh::kBins - 1]};
  __syncthreads();  // sh's next user may write count[kBins]
  LAB_SLICE(lab_slice_mark(5));
  return found;
}

// The list's largest key as a draw's unit: `known` (kKnown: list_top_k gave it), else a block
// reduction over the list (each thread's kPerThread entries from `first`). A template
// argument, not a test of `known`: the kernels keep no reduction they never run.
template <int kPerThread, bool kKnown>
__device__ __forceinline__ std::uint32_t list_largest(const float* keys, int first, std::uint32_t known) {
  if constexpr (kKnown) return known;
  std::uint32_t mx = 0u;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) mx = max(mx, prob_key(keys[first + i]));
  return block_reduce(mx, MaxOp{}, 0u);
}

// The list entry's fixed-point mass: 0 for an empty entry or a key below min_key.
__device__ __forceinline__ std::uint64_t list_mass(float v, std::uint32_t min_key, const FixedPointScale& fx) {
  return fx.kept_mass(prob_key(v), min_key);
}

// Rank 0: the token drawn from the list's keys >= min_key (keys as floats, 0 for an empty
// entry; positions); the list holds every key of the row's kept set in row order. -1:
// nothing to draw. By the whole block: the row's largest key (kLargestKnown: `largest`, else a
// block reduction) and a block scan of each thread's two entries.
template <int kCtas, bool kLargestKnown>
__device__ std::int64_t draw_from_local_list_block(const float* keys, const std::uint32_t* positions,
                                                   std::int64_t n, std::uint32_t min_key, const RowRandom& rng,
                                                   std::uint32_t largest) {
  __shared__ std::int64_t found_token;
  // The row's largest key is in the list (k >= 1): the draw's unit, as inverse_cdf_draw's.
  constexpr int kPerThread = kLocalListEntries<kCtas> / kSliceThreads;
  static_assert(kLocalListEntries<kCtas> % kSliceThreads == 0, "whole chunks per thread");
  const int first = threadIdx.x * kPerThread;
  const std::uint32_t mx = list_largest<kPerThread, kLargestKnown>(keys, first, largest);
  if (mx == 0u) return -1;
  const FixedPointScale fx = FixedPointScale::of(mx, n);
  std::uint64_t q[kPerThread], own = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    q[i] = fx.kept_mass(prob_key(keys[first + i]), min_key);
    own += q[i];
  }
  std::uint64_t total;
  const std::uint64_t before = block_exclusive_scan(own, &total);
  if (total == 0) return -1;
  const Philox4 w = rng.words(0);
  const std::uint64_t target = __umul64hi((static_cast<std::uint64_t>(w.x) << 32) | w.y, total);
  if (target >= before && target - before < own) {  // exactly one thread
    std::uint64_t rest = target - before;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (rest < q[i]) {
        found_token = positions[first + i];
        break;
      }
      rest -= q[i];
    }
  }
  __syncthreads();
  return found_token;
}

// draw_from_local_list_block's token by warp 0 alone (lab AOTINFER_LAB_FEWER_BARRIERS), as
// draw_from_segments draws: each lane takes a run of kEntries / 32 entries (the row's largest
// key, in the list since k >= 1, gives the unit, as inverse_cdf_draw's), a warp scan of the
// runs' masses finds the lane whose run holds the target, and the warp scans that run 32
// entries a step. The same integer prefix sums as the block scan, so the same token, with one
// block barrier where the block reduction and scan take six. A lane reads its run's float4s
// starting at its own lane number, so that the eight lanes of a shared-memory wavefront hit
// different banks.
template <int kCtas>
__device__ std::int64_t draw_from_local_list_warp(const float* keys, const std::uint32_t* positions,
                                                  std::int64_t n, std::uint32_t min_key, const RowRandom& rng) {
  __shared__ std::int64_t found_token;
  constexpr int kRun = kLocalListEntries<kCtas> / 32, kRunQuads = kRun / 4;
  constexpr int kChunk = kRun < 32 ? kRun : 32;  // entries of the holder's run per warp step
  static_assert(kRun % kChunk == 0 && kRun % 4 == 0, "whole quads and chunks per run");
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const float4* run = reinterpret_cast<const float4*>(keys) + lane * kRunQuads;
    std::uint32_t mx = 0u;
#pragma unroll 2
    for (int i = 0; i < kRunQuads; ++i) {
      const float4 q = run[(i + lane) % kRunQuads];
      mx = max(max(mx, max(prob_key(q.x), prob_key(q.y))), max(prob_key(q.z), prob_key(q.w)));
    }
    mx = warp_reduce(mx, MaxOp{});
    std::int64_t token = -1;
    if (mx != 0u) {
      const FixedPointScale fx = FixedPointScale::of(mx, n);
      std::uint64_t own = 0;
#pragma unroll 2
      for (int i = 0; i < kRunQuads; ++i) {
        const float4 q = run[(i + lane) % kRunQuads];
        own += list_mass(q.x, min_key, fx) + list_mass(q.y, min_key, fx) + list_mass(q.z, min_key, fx) +
               list_mass(q.w, min_key, fx);
      }
      const std::uint64_t inclusive = warp_inclusive_scan(own);
      const std::uint64_t total = __shfl_sync(kFullMask, inclusive, 31);
      if (total != 0) {
        const WarpCrossing holder = warp_crossing(own, inclusive, __umul64hi(draw_word(rng, 0), total));
        std::uint64_t rest = holder.rest;
        for (int base = holder.lane * kRun; base < (holder.lane + 1) * kRun; base += kChunk) {  // (alike in every lane)
          const std::uint64_t m = lane < kChunk ? list_mass(keys[base + lane], min_key, fx) : 0;
          const std::uint64_t chunk = warp_inclusive_scan(m);
          const std::uint64_t chunk_total = __shfl_sync(kFullMask, chunk, 31);
          if (rest < chunk_total) {
            token = positions[base + warp_crossing(m, chunk, rest).lane];
            break;
          }
          rest -= chunk_total;
        }
      }
    }
    if (lane == 0) found_token = token;
  }
  __syncthreads();
  return found_token;
}

// Rank 0: the token drawn from the list's keys >= min_key (keys as floats, 0 for an empty
// entry; positions); the list holds every key of the row's kept set in row order. -1:
// nothing to draw. kLargestKnown: `largest` is the list's largest key (list_top_k's).
template <int kCtas, bool kByWarp = kLabFewerBarriers, bool kLargestKnown = false>
__device__ __forceinline__ std::int64_t draw_from_local_list(const float* keys, const std::uint32_t* positions,
                                                             std::int64_t n, std::uint32_t min_key,
                                                             const RowRandom& rng, std::uint32_t largest = 0u) {
  if constexpr (kByWarp) return draw_from_local_list_warp<kCtas>(keys, positions, n, min_key, rng);
  return draw_from_local_list_block<kCtas, kLargestKnown>(keys, positions, n, min_key, rng, largest);
}

// Rank 0, joint mode, a row the slices' sums leave undecided (two_search_list_filter): the
// row's total mass exactly as a search's level 0 sums it (each level-0 bin's mantissa sum
// shifted once into the masses' unit `base`), read from the row `x` in global memory. Rank 0
// settles such a row alone, so the peers leave after the list exchange as in the top-k
// sampler (session 32, dev/NOTES.md item 64: 0.96-0.97x against sending them a verdict and
// searching cluster-wide).
template <typename Sh>
__device__ __noinline__ std::uint64_t exact_row_mass(const float* x, std::int64_t n, int base, Sh& sh) {
  __syncthreads();  // the list searches' last reads of sh are done
  for (int i = threadIdx.x; i <= Sh::kBins; i += blockDim.x) {
    sh.count[i] = 0;  // (count has the sink bin kBins)
    if (i < Sh::kBins) {
      sh.mass_lo[i] = 0;
      sh.mass_hi[i] = 0;
    }
  }
  __syncthreads();
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::uint32_t key = prob_key(x[i]);
    add_to_level0(sh, key, key >> Sh::shift(0), true);
  }
  __syncthreads();
  std::uint64_t own = 0;
  for (int b = threadIdx.x; b < Sh::kBins; b += blockDim.x) {
    const std::uint32_t field = Sh::exponent_field(static_cast<std::uint32_t>(b));
    std::uint64_t sum = (static_cast<std::uint64_t>(sh.mass_hi[b]) << 12) + sh.mass_lo[b];
    if (field > 0) sum += static_cast<std::uint64_t>(sh.count[b]) << 23;  // the implicit bits
    own += shifted_mass(sum, static_cast<int>(field > 0 ? field : 1) + base);
  }
  return block_reduce(own, SumOp{}, std::uint64_t{0});
}

// Rank 0, the two-search filters (top-k then top-p, joint): the kept set's smallest key found
// in the list as prob_filter<kTwoSearches> finds it in the whole row. The top-k search over
// the list gives the row's t_k and the mass of its set (every level-0 bin above t_k's is
// whole in the list, and within t_k's bin the later levels count keys >= t_k only, as over
// the row); the top-p search within that set is the row's too (keys below t_k take no part
// in either). Joint mode's goal needs the row's total mass, the sum of level-0 bins each
// floored as a whole, which no CTA has: `row_sum` (the slices' sums of their probabilities)
// puts it within [lo, hi]; only where a total in between could give another kept set does
// rank 0 sum it exactly from the row `x` (exact_row_mass; rare, the interval is about 2^-19
// of the total wide). `any` is false where the row has no participant.
struct ListFilter {
  std::uint32_t min_key;
  bool any;
};

// Joint's bounds [lo, hi] on the row's total mass in the masses' unit `base`, from
// r = ldexp(row_sum, 150 + base), row_sum the slices' sums. The total is at most the exact sum
// r of the probabilities in that unit, and above r less one unit per level-0 bin (each floored
// once). Each thread of a slice sums a listing trip's keys (at most eight) in float and adds
// that once to its double sum (a trip whose float sum overflows adds its keys in double
// instead): a float sum of at most eight non-negative keys is within 7 * 2^-24 (< 2^-21) of
// theirs, and the double sums of a slice's (at most 2^15) floats and rank 0's sum of at most
// sixteen slices add at most 2^-37, so row_sum is within r * (2^-21 + 2^-37) of r, which the
// slack of r * 2^-20 covers about twofold. The kept set does not depend on the slack (the
// bounds only decide where rank 0 sums the row exactly), so neither does the token. Two
// functions, so that a caller that may need only the lower bound computes the upper one where
// it does (joint_top_k_set_draw).
//
// The float trip sums replaced a conversion and a double add per key: joint's listing took
// ~0.9k cycles more than top-k then top-p's in the same kernel at 1 x 32000 (H100,
// history/trace-slice-phases-f00efa8-h100.txt). Measured as lab AOTINFER_LAB_JOINT_FLOAT_SUMS
// (session 57, H100, A B A B in one machine start, the same tokens, the 757 sampling tests
// passing under it; history/ab-sampling-joint-float-sums-5386537-h100.txt): joint and top-k
// then top-p 0.991-0.998x at 1 and 4 rows, 0.970-0.981x at 16 rows of 32000, 0.942-0.956x at
// 16 rows of 128256 (joint 1.001-1.003x at 4 x 128256 peaked and sharp).
constexpr double kRowSumSlack = 0x1p-20;
template <typename Sh>
__device__ __forceinline__ std::uint64_t row_mass_lo(double r) {
  return __double2ull_rd(fmax(r - r * kRowSumSlack - Sh::kBins, 1.0));
}
__device__ __forceinline__ std::uint64_t row_mass_hi(double r) { return __double2ull_ru(r + r * kRowSumSlack); }

template <typename Sh>
__device__ ListFilter two_search_list_filter(const LocalScope<false>& list, const float* x, std::int64_t n,
                                             const FilterParams& f, std::int64_t row, std::int32_t k, double row_sum,
                                             Sh& sh) {
  const float p = f.top_p_array ? f.top_p_array[row] : f.top_p;
  const bool use_p = p < 1.f;  // as prob_filter: NaN or >= 1 filters nothing
  std::uint32_t floor_key = 0u;
  auto key_of = [&floor_key](float v) {
    const std::uint32_t kk = prob_key(v);
    return kk >= floor_key ? kk : 0u;
  };
  SearchTarget top_k{false, static_cast<std::uint64_t>(k), 0.f, 0, use_p};
  top_k.want_top = true;
  top_k.row_length = n;
  const Threshold t = radix_threshold(list, key_of, top_k, sh);
  if (t.top_bin == 0) return ListFilter{0u, false};
  if (!use_p) return ListFilter{t.key, true};
  const float fraction = fmaxf(p, 0.f);
  const std::uint64_t mass_k = t.mass_ge;
  std::uint64_t base_lo = mass_k, base_hi = mass_k;  // top-k then top-p: the goal is exact
  if (f.mode == FilterMode::kJoint) {
    const double r = ldexp(row_sum, 150 + t.mass_base);
    base_hi = row_mass_hi(r);
    base_lo = row_mass_lo<Sh>(r);
    // prob_filter's test, mass_k >= mass_goal(p, total), where the bounds disagree on it.
    if (mass_k >= mass_goal(fraction, base_lo) && mass_k < mass_goal(fraction, base_hi)) {
      base_lo = base_hi = exact_row_mass(x, n, t.mass_base, sh);
    }
    if (mass_k < mass_goal(fraction, base_lo)) return ListFilter{t.key, true};
  }
  floor_key = t.key;
  SearchTarget top_p{true, 0, fraction, base_hi, true};
  top_p.row_length = n;
  Threshold tp = radix_threshold(list, key_of, top_p, sh);
  // A lower goal crosses the same bins at every level while the keys above the last one fall
  // short of it, unless the search ended on a level without a crossing (a lower goal may find
  // one there). Otherwise the search again with the exact total.
  if (base_lo != base_hi && !(tp.mass_above < mass_goal(fraction, base_lo) && !tp.kept_whole_bin)) {
    top_p.mass_base = exact_row_mass(x, n, t.mass_base, sh);
    tp = radix_threshold(list, key_of, top_p, sh);
  }
  return ListFilter{max(tp.key, t.key), true};
}

// Top-k then top-p (FlashInfer's default filter_apply_order) by rank 0's warp 0 over the top-k
// set (top_k_set_in_warp.cuh). The block finds t_k by count, as the top-k sampler does
// (list_top_k's sorting networks); warp 0 copies the keys >= t_k, sorts them, takes
// the largest key whose running mass reaches p times the set's mass (an exact goal) and draws.
// Returns the token in thread 0 (-1: nothing kept), or kSetUndecided in every thread where the
// set is too large or too deep for exact masses (two_search_list_filter then decides).
constexpr std::int64_t kSetUndecided = -3;

template <int kCtas, typename Sh>
__device__ __noinline__ std::int64_t top_k_then_top_p_draw_in_warp(const float* list_keys,
                                                                   const std::uint32_t* list_positions,
                                                                   std::int64_t n, const FilterParams& f,
                                                                   std::int64_t row, std::int32_t k,
                                                                   const RowRandom& rng, Sh& sh) {
  __shared__ WarpSet ws;
  const float p = f.top_p_array ? f.top_p_array[row] : f.top_p;
  // t_k, or 0 where fewer than k keys take part (then the set is all of them).
  const std::uint32_t set_floor = max(list_top_k<kCtas>(list_keys, k, sh).key, 1u);
  std::int64_t token = -1;
  if (threadIdx.x < 32) {
    const CopiedSet set = warp_copy_set<kLocalListEntries<kCtas>>(list_keys, list_positions, set_floor, ws);
    bool left_to_searches = set.size > kWarpSetMax;
    std::uint32_t min_key = set_floor;
    if (!left_to_searches && set.size > 0 && p < 1.f) {  // as prob_filter: NaN or >= 1 filters nothing
      const int base = search_mass_base(set.largest >> 23, n);
      left_to_searches = FixedPointScale::biased_exponent(set.smallest) + base < 0;
      if (!left_to_searches) {
        const std::uint64_t mass_k = warp_sort_set(ws, set.size, base);
        const std::uint64_t goal = mass_goal(fmaxf(p, 0.f), mass_k);
        if (mass_k >= goal) min_key = warp_key_reaching(ws, goal);  // else the set is kept whole
      }
    }
    if (!left_to_searches && set.size > 0) token = warp_draw_from_set(ws, set.size, min_key, set.largest, n, rng);
    if (threadIdx.x == 0) ws.left_to_searches = left_to_searches;
  }
  __syncthreads();
  return ws.left_to_searches ? kSetUndecided : token;
}

// Joint top-k / top-p where the top-k set's mass reaches p times the row's (sharp rows): the
// top-p set then lies within the top-k set, so warp 0 finds t_p within it as
// top_k_then_top_p_draw_in_warp does, with joint's goal, p times the row's mass, in place of p
// times the set's (joint_top_k_set_draw below calls it). The row's mass is known within
// [base_lo, base_hi] (two_search_list_filter's bounds from the slices' double sums, in the
// unit of the row's largest key): where the goals of both bounds reach the same key, every
// total between them does, the exact one included, so the kept set is the two searches';
// where they differ, or the set's mass lies between the goals (the searches then sum the row
// exactly), or the set is too large or too deep for exact masses, it returns kSetUndecided
// and the two searches run. The draw over the set is top_k_then_top_p_draw_in_warp's (the list
// draw's prefix sums). A body of its own rather than a goal argument of that function, whose
// kernels' register allocation is to stay that which was measured (dev/NOTES.md item 80):
// keep the two in step. dev/model_joint_warp_lab.py models the verdict against the searches.
template <int kCtas>
__device__ __noinline__ std::int64_t joint_top_p_in_set_draw(const float* list_keys,
                                                             const std::uint32_t* list_positions, std::int64_t n,
                                                             float fraction, std::uint32_t set_floor,
                                                             std::uint64_t base_lo, std::uint64_t base_hi,
                                                             const RowRandom& rng) {
  __shared__ WarpSet ws;
  std::int64_t token = -1;
  if (threadIdx.x < 32) {
    const CopiedSet set = warp_copy_set<kLocalListEntries<kCtas>>(list_keys, list_positions, set_floor, ws);
    bool left_to_searches = set.size > kWarpSetMax || set.size == 0;
    if (!left_to_searches) {
      const int base = search_mass_base(set.largest >> 23, n);
      left_to_searches = FixedPointScale::biased_exponent(set.smallest) + base < 0;
      if (!left_to_searches) {
        const std::uint64_t mass_k = warp_sort_set(ws, set.size, base);
        const std::uint64_t goal_lo = mass_goal(fraction, base_lo), goal_hi = mass_goal(fraction, base_hi);
        std::uint32_t min_key = 0u;
        if (mass_k >= goal_hi) {
          min_key = warp_key_reaching(ws, goal_hi);
          left_to_searches = warp_key_reaching(ws, goal_lo) != min_key;
        } else {
          left_to_searches = true;
        }
        if (!left_to_searches) token = warp_draw_from_set(ws, set.size, min_key, set.largest, n, rng);
      }
    }
    if (threadIdx.x == 0) ws.left_to_searches = left_to_searches;
  }
  __syncthreads();
  return ws.left_to_searches ? kSetUndecided : token;
}

// Joint top-k / top-p in the list kernels of clusters of 4 and 8 (local_list_draw): the verdict
// of most rows, "the top-k set's mass is below p times the row's, so the kept set is the top-k
// set" (two_search_list_filter's first return; the benchmark's rows, whose top-50 mass is ~0.74
// at p = 0.9), reached the top-k sampler's way: t_k by count (list_top_k's sorting
// networks), and the mass of the set summed per key by the draw's own scan, instead of
// the top-k search with masses; where the set's mass reaches the goal's lower bound,
// joint_top_p_in_set_draw settles the row within the set. Measured (session 51, dev/NOTES.md
// item 83, A B A B in one machine start, graph us; history/ab-sampling-joint-set-then-warp-
// 70f20e2.txt): joint 0.85-0.90x on peaked rows at 1 and 16 rows of 32000 and 128256 (1 x
// 32000 13.5 -> 11.5), on sharp rows (softmax(8 x randn), top-50 mass ~0.99) 0.86-0.98x, but
// 1.068x at 1 x 128256 sharp, the one case in clusters of 16 (a list of 2048 entries, which
// the warp's copy walks in 16 steps): clusters of 16 keep the two searches. Without
// joint_top_p_in_set_draw (returning kSetUndecided there) sharp rows took 1.14-1.23x
// (history/ab-sampling-joint-top-k-set-first-c6ccbe1.txt).
// The same token as the two searches: the per-key masses add up to the search's mass of the
// set where no kept key's mass is floored (exponent field + base >= 0 for every kept key:
// then each level-0 bin's sum is the sum of its keys' masses), with the same unit (the
// row's largest key normal); the count search and the masses search give keys between which
// no element lies, so the same kept set; and the draw is draw_from_local_list_block's, the
// same integer prefix sums. A floored key or a subnormal largest key returns kSetUndecided
// and the searches run. Its scan and draw are a copy of draw_from_local_list_block's, the
// verdict between them: a body shared with the top-k kernels would move their register
// allocation (dev/NOTES.md item 80). Keep them in step.
// It stays a call: inlined into the kernel body (lab AOTINFER_LAB_JOINT_SET_DRAW_INLINE, session
// 54, H100, A B A B in one machine start, the same tokens) it ran joint 0.971-1.017x, 1 x 32000
// peaked 0.996x, where its instruction-fetch stalls were to fall (history/ab-sampling-joint-set-
// draw-inline-041d04e-h100.txt; dev/NOTES.md item 86).
template <int kCtas, typename Sh>
__device__ __noinline__ std::int64_t joint_top_k_set_draw(const float* keys, const std::uint32_t* positions,
                                                          std::int64_t n, const FilterParams& f, std::int64_t row,
                                                          std::int32_t k, double row_sum, const RowRandom& rng,
                                                          Sh& sh) {
  __shared__ std::int64_t found_token;
  const float p = f.top_p_array ? f.top_p_array[row] : f.top_p;
  // t_k, or 0 where fewer than k keys take part (then the set is all of them).
  const ListTopK top = list_top_k<kCtas>(keys, k, sh);
  const std::uint32_t min_key = top.key;
  constexpr int kPerThread = kLocalListEntries<kCtas> / kSliceThreads;
  static_assert(kLocalListEntries<kCtas> % kSliceThreads == 0, "whole chunks per thread");
  const int first = threadIdx.x * kPerThread;
  const std::uint32_t mx = top.largest;
  if (mx == 0u) return -1;  // no participant: the default path's verdict too
  const FixedPointScale fx = FixedPointScale::of(mx, n);
  std::uint64_t q[kPerThread], own = 0;
  bool floored = false;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const std::uint32_t key = prob_key(keys[first + i]);
    q[i] = fx.kept_mass(key, min_key);
    own += q[i];
    floored |= key != 0u && key >= min_key && FixedPointScale::biased_exponent(key) + fx.base < 0;
  }
  if (__syncthreads_or(floored || (mx >> 23) == 0u)) return kSetUndecided;
  std::uint64_t total;
  const std::uint64_t before = block_exclusive_scan(own, &total);
  if (p < 1.f) {  // as prob_filter: NaN or >= 1 filters nothing, and the set is the top-k set
    // two_search_list_filter's bounds of the row's total, in the same unit.
    const double r = ldexp(row_sum, 150 + fx.base);
    const std::uint64_t base_lo = row_mass_lo<Sh>(r);
    // (total is the block's: every thread takes the same branch.) A min_key of 0 (fewer
    // than k keys take part) keeps them all, as a floor of 1 does.
    if (total >= mass_goal(fmaxf(p, 0.f), base_lo)) {
      return joint_top_p_in_set_draw<kCtas>(keys, positions, n, fmaxf(p, 0.f), max(min_key, 1u), base_lo,
                                            row_mass_hi(r), rng);
    }
  }
  const Philox4 w = rng.words(0);
  const std::uint64_t target = __umul64hi((static_cast<std::uint64_t>(w.x) << 32) | w.y, total);
  if (target >= before && target - before < own) {  // exactly one thread
    std::uint64_t rest = target - before;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (rest < q[i]) {
        found_token = positions[first + i];
        break;
      }
      rest -= q[i];
    }
  }
  __syncthreads();
  return found_token;
}

// The cluster-wide search and draw, as a call of its own: inlined, its registers made the
// local path spill.
template <FilterFamily kFamily, typename Scope, typename Sh>
__device__ __noinline__ std::int64_t cluster_wide_draw(const Scope& scope, std::int64_t n, const FilterParams& f,
                                                       std::int64_t row, const RowRandom& rng, Sh& sh) {
  return filtered_draw<kFamily>(scope, n, f, row, rng, sh);
}

// The top-k draw of a cluster kernel (every CTA calls it, after its slice is loaded), or with
// kTwoSearches the draw of top-k then top-p and of joint top-k / top-p: the token in rank 0,
// -2 in the others, -1 in rank 0 when nothing is kept; or, where k is too large for the list
// or a region overflows, filtered_draw's result (the cluster-wide search).
template <bool kTwoSearches, int kCtas, typename Sh>
__device__ std::int64_t local_list_draw(const SliceScopeOf<kCtas>& scope, const float* x, std::int64_t n,
                                        const FilterParams& f, std::int64_t row, const RowRandom& rng, Sh& sh) {
  constexpr FilterFamily kFamily = kTwoSearches ? FilterFamily::kTwoSearches : FilterFamily::kOneSearch;
  __shared__ __align__(16) float list_keys[kLocalListEntries<kCtas>];
  __shared__ std::uint32_t list_positions[kLocalListEntries<kCtas>];
  __shared__ int overflowed[kCtas];
  __shared__ double slice_sums[kCtas];  // joint: each slice's probabilities, summed
  const std::int32_t k = row_top_k(f, row);
  if (!(k > 0 && k < n && k <= kLocalListRegion / 2)) return cluster_wide_draw<kFamily>(scope, n, f, row, rng, sh);
  const unsigned rank = cooperative_groups::this_cluster().block_rank();
  // (Every peer has started and initialised its push barriers: load_slice's barrier phase.)
  // The two-search kernels' slices do not finish in one warp: joint ran 0.999-1.005x with
  // it (session 34, history/ab-sampling-joint-slice-finish-d3dc2ca.txt).
  const LocalScope<!kTwoSearches> slice(scope.s, scope.groups, scope.first);
  // t_c need only be at most the slice's k-th largest key with at most a region's keys above
  // it: its search stops as soon as that holds, which spares peaked slices levels 1 and 2 and
  // flat ones level 2 (session 32, dev/NOTES.md item 64: 0.83-0.85x for top-k at 1 and 16 x
  // 32000, 0.88-0.89x for joint at 16 x 32000, against the slice's exact k-th largest key).
  // Level 0 first, scanned by one warp (level0_count_bound.cuh): the crossing bins of slices
  // of a few to sixteen thousand keys mostly hold tens of keys, so it mostly settles t_c.
  // The test never fails (a slice in shared memory holds at most 2^14 groups). It stays for
  // the code ptxas makes of the list kernels with it: without it their registers are
  // allocated otherwise, and that build ran top-k 1.03-1.06x slower at 1 row and 16 x 32000
  // (H100, A B A B in one machine start, the same tokens; session 53,
  // history/ab-sampling-slice-bound-gate-71b12b3-h100.txt).
  constexpr std::int64_t kNeverLargerSlice = std::int64_t{1} << 40;
  std::uint32_t t_c = scope.groups <= kNeverLargerSlice ? level0_count_bound(slice, k, kLocalListRegion, sh)
                                                        : kBoundUndecided;
  if (t_c == kBoundUndecided) t_c = local_top_k_key(slice, k, sh, kLocalListRegion);
  t_c = max(t_c, 1u);  // 0: every participant
  LAB_SLICE(lab_slice_mark(2));
  // The list, the slice sums and the overflow flags go by cluster_push.cuh's pushes, one
  // exchange: every CTA pushes its whole region (kept keys and their positions, then zeros),
  // its sum (joint) and its flag into rank 0, and its flag into every other CTA, so each CTA
  // expects a fixed byte count. Against remote stores between an arrive / wait pair and a
  // cluster barrier (two GPU-scope fences, ~1.2k cycles each on an H100): top-k 0.87-0.96x,
  // joint 0.85-0.97x, top-k then top-p 0.86-0.96x at 1-64 rows of 32000 and 128256 (H100, A B
  // A B in one machine start, the same tokens; history/ab-sampling-list-pushes-c5fdb15-h100.txt).
  const unsigned list_exchange = scope.open_exchange();
  auto push = [&](std::uint64_t at, float key, std::uint32_t position) {
    push_async(&list_keys[rank * kLocalListRegion + at], 0u, key, list_exchange & 1u);
    push_async(&list_positions[rank * kLocalListRegion + at], 0u, position, list_exchange & 1u);
  };
  const bool sums = kTwoSearches && f.mode == FilterMode::kJoint;
  double sum = 0.0;
  // The slice's keys >= t_c in row order. A trip covers kTrip blockDim groups, thread t taking
  // groups base + t, base + blockDim + t, ...: one block scan of their counts, packed in one
  // word (each part's total is at most 4 blockDim), gives each thread its places. The top-k
  // kernels take two parts, half the trips and block scans of one (at 1 x 32000 one trip
  // instead of two): 0.93-0.99x the time at 1-16 rows of 32000 and 128256 (session 51,
  // history/ab-sampling-top-k-packed-listing-c6ccbe1.txt). So do the two-search kernels in
  // clusters of 4 and 8 (session 52, H100: joint and top-k then top-p 0.985-0.992x at 1 x
  // 32000, 0.96-0.98x at 16 rows of 32000 and 128256, though ptxas counts 84 B of spill stores
  // against 48), but not in clusters of 16: joint 1.008-1.015x at 1 x 128256
  // (history/ab-sampling-two-search-packed-listing-2b5dd08-h100.txt).
  constexpr int kTrip = kTwoSearches && kCtas == kWideSliceCtas ? 1 : 2;
  static_assert(kTrip <= 2, "two parts to a packed word");
  // Part h of a packed word.
  auto part = [](std::uint64_t word, int h) -> std::uint64_t {
    return kTrip == 1 ? word : word >> (32 * h) & 0xffffffffu;
  };
  std::uint64_t listed = 0;
  for (std::int64_t base = 0; base < scope.groups; base += kTrip * blockDim.x) {
    float v[kTrip][4];
    std::uint32_t keep[kTrip];
    std::uint64_t counts = 0;
    float trip_sum = 0.f;  // the trip's keys (kRowSumSlack's comment)
#pragma unroll
    for (int h = 0; h < kTrip; ++h) {
      const std::int64_t g = base + h * blockDim.x + threadIdx.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) v[h][j] = NAN;
      if (g < scope.groups) scope.load(g, v[h]);
      keep[h] = 0u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t key = prob_key(v[h][j]);
        keep[h] |= (key >= t_c ? 1u : 0u) << j;
        if (sums) trip_sum += __uint_as_float(key);  // (key 0: 0.f)
      }
      counts |= static_cast<std::uint64_t>(__popc(keep[h])) << (32 * h);
    }
    if (sums) {
      if (trip_sum < INFINITY) {
        sum += static_cast<double>(trip_sum);
      } else {  // keys near FLT_MAX: in double, one by one
#pragma unroll
        for (int h = 0; h < kTrip; ++h) {
#pragma unroll
          for (int j = 0; j < 4; ++j) sum += static_cast<double>(__uint_as_float(prob_key(v[h][j])));
        }
      }
    }
    std::uint64_t trip_total;
    const std::uint64_t before = block_exclusive_scan(counts, &trip_total);
#pragma unroll
    for (int h = 0; h < kTrip; ++h) {
      const std::int64_t g = base + h * blockDim.x + threadIdx.x;
      std::uint64_t at = listed + part(before, h) + (h == 0 ? 0 : part(trip_total, 0));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!(keep[h] >> j & 1u)) continue;
        if (at < kLocalListRegion) push(at, v[h][j], static_cast<std::uint32_t>(4 * (scope.first + g) + j));
        ++at;
      }
    }
    listed += kTrip == 1 ? trip_total : part(trip_total, 0) + part(trip_total, 1);
  }
  for (std::uint64_t i = listed + threadIdx.x; i < kLocalListRegion; i += blockDim.x) {
    push(i, 0.f, 0u);  // (the positions too: a fixed byte count)
  }
  if (sums) {
    sum = block_reduce(sum, SumOp{}, 0.0);
    if (threadIdx.x == 0) push_async(&slice_sums[rank], 0u, sum, list_exchange & 1u);
  }
  if (threadIdx.x < kCtas) {
    push_async(&overflowed[rank], threadIdx.x, listed > kLocalListRegion ? 1 : 0, list_exchange & 1u);
  }
  LAB_SLICE(lab_slice_mark(3));
  const unsigned to_rank0 = kCtas * (kLocalListRegion * 8u + (sums ? 8u : 0u));
  wait_for_pushes(list_exchange, kCtas * 4u + (rank == 0 ? to_rank0 : 0u));
  LAB_SLICE(lab_slice_mark(4));
  int any = 0;
#pragma unroll
  for (int r = 0; r < kCtas; ++r) any |= overflowed[r];
  if (any) return cluster_wide_draw<kFamily>(scope, n, f, row, rng, sh);
  if (rank != 0) return -2;  // no CTA reads a peer from here on: rank 0 settles the row alone
  if constexpr (!kTwoSearches) {
    const ListTopK top = list_top_k<kCtas>(list_keys, k, sh);
    return draw_from_local_list<kCtas, kLabFewerBarriers, true>(list_keys, list_positions, n, top.key, rng,
                                                                 top.largest);
  } else {
    double row_sum = 0.0;
#pragma unroll
    for (int r = 0; r < kCtas; ++r) row_sum += slice_sums[r];
    // (Clusters of 16 keep the searches: joint_top_k_set_draw's comment.)
    if constexpr (kCtas != kWideSliceCtas) {
      if (f.mode == FilterMode::kJoint) {
        const std::int64_t token =
            joint_top_k_set_draw<kCtas>(list_keys, list_positions, n, f, row, k, row_sum, rng, sh);
        if (token != kSetUndecided) return token;
      }
    }
    if constexpr (!kLabTopKFirstSearches) {
      if (f.mode == FilterMode::kTopKThenTopP) {
        const std::int64_t token =
            top_k_then_top_p_draw_in_warp<kCtas>(list_keys, list_positions, n, f, row, k, rng, sh);
        if (token != kSetUndecided) return token;
      }
    }
    const ListFilter kept = two_search_list_filter(local_list_scope<kCtas>(list_keys), x, n, f, row, k, row_sum, sh);
    return kept.any ? draw_from_local_list<kCtas>(list_keys, list_positions, n, kept.min_key, rng) : -1;
  }
}

}  // namespace detail
#endif

}  // namespace aotinfer::sampling
