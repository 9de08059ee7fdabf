// Sorting-free threshold search over one row, by radix selection on 32-bit keys.
//
// Every element maps to a key whose unsigned order is the order of its value, and (for
// probabilities) to a fixed-point mass (fixed_point.cuh): its 24-bit mantissa shifted by its
// exponent relative to the row's largest, found by the first level itself, so no pass over the
// row precedes the search. The histograms sum mantissas; a level-0 bin holds one exponent, so
// the scan shifts each bin's sum once (exact to S - 24 binades below the largest, a deeper
// bin's sum floored as a whole). Up to three passes over the row build a histogram of the
// next key bits among the elements that match the prefix found so far (counts and masses,
// integer atomics, so the result does not depend on timing), and a descending scan of the
// histogram picks the bin where the running count or mass first reaches the target. After the last pass the prefix is the exact key B of the element where
// the target is reached: "keep keys >= B" is then exactly the top-k set (ties at the k-th
// value kept) or the smallest top-p set (ties kept). A search may stop after one or two
// passes when the crossing bin is kept whole (see the loop's end). In the one-CTA-per-row
// kernels, levels 1 and 2 may instead read level 0's crossing bin from shared memory, where a
// gather pass copied it (gather.cuh, gather_crossing_bin), or, for a count search, where level
// 0 listed it while it read the row (head_bound_list.cuh); the two-search sampler's second
// search reads every level from a list of the first search's kept set (kept_set_list.cuh).
//
// The histograms take 11/11/10 key bits per level (RadixShared: 2048 bins, 24 KB). A 13/13/6
// layout (8192 bins, 96 KB) was measured slower at vocab 32000 (15-25%) and mixed at 128256
// (history/sampling-c4e2db1-radix-13-bits-reverted.md).
//
// Key 0 marks an element that takes no part (NaN, zero, negative or infinite probability).
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "fixed_point.cuh"
#include "gather.cuh"
#include "head_bound_list.cuh"
#include "row_scope.cuh"
#include "segment_pass.cuh"

namespace aotinfer::sampling {

constexpr int kRowThreads = 1024;

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

// The histograms of one search level, and the crossing it found. Levels 0 and 1 take kBits
// key bits each (from the top), level 2 the remaining 32 - 2 kBits.
struct RadixShared {
  static constexpr int kBits = 11;
  static constexpr int kBins = 1 << kBits;
  __host__ __device__ static constexpr int shift(int level) {
    return level == 0 ? 32 - kBits : (level == 1 ? 32 - 2 * kBits : 0);
  }
  __host__ __device__ static constexpr int bins(int level) { return level < 2 ? kBins : 1 << (32 - 2 * kBits); }
  static constexpr int kDrawSegments = kBins * 3 / 2;  // segment_mass
  // The exponent field of the probability keys in level-0 bin `bin` (sign bit 0).
  __host__ __device__ static constexpr std::uint32_t exponent_field(std::uint32_t bin) {
    return bin >> (23 - shift(0));
  }
  // The exponent field of the row's largest key, from level 0's top_bin (the highest
  // non-empty bin + 1; 0: no participant, field 0).
  __host__ __device__ static constexpr std::uint32_t top_exponent_field(std::uint32_t top_bin) {
    return top_bin > 0 ? exponent_field(top_bin - 1) : 0u;
  }
  union {
    struct {
      std::uint32_t count[kBins + 1];  // + level 0's sink for non-participants (add_to_level0)
      std::uint32_t mass_lo[kBins];  // mass = (mass_hi << 12) + mass_lo, see add_to_histogram
      std::uint32_t mass_hi[kBins];
    };
    // inverse_cdf.cuh, once the threshold search is over: the mass of each row segment.
    std::uint64_t segment_mass[kBins * 3 / 2];
  };
  // The crossing of one level, written by the one thread that finds it (before level 0's:
  // the row head's crossing bin, head_bound_list.cuh's count_crossing_bin).
  std::uint32_t digit;
  GatherSizes gather_sizes;    // the kernel's (gather.cuh); read only by kernels that gather
  std::uint32_t gathered[32];  // per warp: how many keys the gather pass listed
  int gather_overflow;         // some warp's slice was too small: the list is dropped
  int found;
  std::uint64_t above_count, above_mass, bin_count, bin_mass;
};

using RowRadixShared = RadixShared;  // the one-CTA-per-row kernels

// The cluster kernels' layout, with what SliceScopeOf<kCtas> (row_scope.cuh) adds.
template <int kCtas>
struct SliceRadixSharedOf : RadixShared {
  // This CTA's share of the cluster-summed histogram: the peers add their bins into it
  // (SliceScopeOf::complete_histograms).
  std::uint32_t share_count[kBins / kCtas];
  std::uint64_t share_mass[kBins / kCtas];
  // 1 + the highest non-empty bin of rank r's own level-0 histogram, pushed by rank r.
  std::uint32_t peer_top[kCtas];
};

// Adds one element (count 1, mass q) to bin d when takes_part. The mass goes in as two 32-bit
// halves (native shared-memory atomics; a 64-bit add is not), split at bit 12 so that neither
// half's sum over a row can overflow: low parts sum to < V * 2^12, high parts to < 2^29.
template <typename Sh>
__device__ __forceinline__ void add_to_histogram(Sh& sh, bool takes_part, std::uint32_t d,
                                                 std::uint64_t q) {
  if (!takes_part) return;
  atomicAdd(&sh.count[d], 1u);
  if (q) {
    atomicAdd(&sh.mass_lo[d], static_cast<std::uint32_t>(q & 0xFFFu));
    atomicAdd(&sh.mass_hi[d], static_cast<std::uint32_t>(q >> 12));
  }
}

// The mass a histogram adds for a participating key: its 23-bit fraction (kFractionSums) or
// its 24-bit mantissa. Every bin of every level holds one exponent field (level 0's top bits
// include it, later levels split one level-0 bin), so a bin's implicit bits are count x 2^23
// when its field is normal, and the scan adds them there (radix_threshold's bin_mass_of): the
// same sums, two instructions fewer per participant (the exponent test and the OR of the
// implicit bit).
template <bool kFractionSums>
__device__ __forceinline__ std::uint32_t histogram_mass(std::uint32_t k) {
  return kFractionSums ? (k & 0x7FFFFFu) : FixedPointScale::mantissa(k);
}

// add_to_histogram for the peeled level 0, without branches (session 27-28, dev/NOTES.md items
// 59-60). A non-participant (key 0) is counted in the sink bin kBins, which no scan reads, and
// adds its mass of 0 to bin `lane` (harmless, and no two lanes of a warp on one address).
// With the branches, ptxas re-derived the shared window's base (S2UR SR_CgaCtaId, UMOV, ULEA)
// inside each element's conditional block and wrapped it in BSSY / BSYNC: about 8 of the 23
// instructions per element of the top-p sampler's level-0 loop. The mass is the key's 23-bit
// fraction alone (histogram_mass<true>: the scan adds the implicit bits). The loop is then
// 16.6 instructions per element (dev/sass_loops.py); measured 0.90-0.99x the
// time of the branching form (results/history/ab-sampling-level0-fraction-0ea0d80.txt).
template <typename Sh>
__device__ __forceinline__ void add_to_level0(Sh& sh, std::uint32_t k, std::uint32_t d, bool masses) {
  atomicAdd(&sh.count[k != 0u ? d : static_cast<std::uint32_t>(Sh::kBins)], 1u);
  if (masses) {
    const std::uint32_t q = histogram_mass<true>(k);
    const std::uint32_t b = k != 0u ? d : (threadIdx.x & 31u);
    atomicAdd(&sh.mass_lo[b], q & 0xFFFu);
    atomicAdd(&sh.mass_hi[b], q >> 12);
  }
}

struct Threshold {
  std::uint32_t key;       // keep elements with key >= key (0: keep every participant)
  std::uint64_t count_ge;  // how many participants have key >= key
  std::uint64_t mass_ge;   // their fixed-point mass (when masses are tracked)
  std::uint64_t all_mass;  // the fixed-point mass of all participants (when masses are tracked)
  // With masses or SearchTarget::want_top: 1 + the highest level-0 bin holding a participant
  // (0: none), i.e. the largest key's top bits (key >> RadixShared::shift(0)), and the masses'
  // unit (search_mass_base: a mass q stands for q * 2^-(150 + mass_base)).
  std::uint32_t top_bin;
  int mass_base;
  // The gather pass ran with GatherSpace::segments: those hold the draw's segment masses of
  // every key above the gathered bin, and the gathered list the bin itself (gather.cuh).
  bool segments_ready = false;
  // kHeadBound: the list (sh.gathered[w] keys in warp w's slice, with positions) holds every
  // key >= key, so an output pass can write the kept elements from it without reading the row.
  bool kept_listed = false;
  // The mass of the keys above the last crossing bin found (mass_ge less that bin's), and
  // whether a deeper level found no crossing (the bin then kept whole). With them a caller
  // whose goal is known only within bounds can tell whether every goal between gives this
  // key (cluster_local_top_k.cuh).
  std::uint64_t mass_above = 0;
  bool kept_whole_bin = false;
};

struct SearchTarget {
  bool by_mass;             // compare masses (top-p) or counts (top-k)
  std::uint64_t count;      // top-k: k
  float mass_fraction;      // top-p: p
  std::uint64_t mass_base;  // mass the fraction applies to; 0: the total of all participants
  bool track_mass;          // accumulate masses (always when by_mass) so mass_ge is known
  bool exact_key = false;   // the key must be the crossing element's own key (no early exit)
  bool want_top = false;    // report Threshold::top_bin without masses (one more reduction)
  std::int64_t row_length = 0;  // V, for the masses' unit (with masses)
  // Every level reads the list of an earlier pass instead of the row (GatherMode::kKeptSet:
  // list_kept_set's, kept_set_list.cuh; GatherMode::kHeadBound in the
  // samplers: the count search's before); listed keys below list_floor take no part.
  bool from_list = false;
  std::uint32_t list_floor = 0;
  // A count search may also stop once the keys >= the crossing bin's lowest number at most
  // `enough`, its key then that lowest key (for a caller that needs only a bound at most the
  // k-th largest key: cluster_local_top_k.cuh's list bound). 0: no such stop.
  std::uint64_t enough = 0;
};

// What the gather pass did (the same in every thread).
struct GatherResult {
  bool listed;    // the bin is in the list (sh.gathered[w] keys in warp w's slice)
  bool segments;  // and the draw's segment masses above the bin are summed
};

// Scopes with kListsKeptSet (filter_sample.cuh's FillingRowScope over GatherMode::kSearch:
// top-p renormalisation) gather every key of the crossing bin and above where they fit, so
// that the output is written from the list, with no read of the row after the search
// (Threshold::kept_listed). Peaked rows at top-p 0.9 keep ~1.3-1.6K of 128256; flat ones
// ~78K, which do not fit and keep the output pass. Measured as lab
// AOTINFER_LAB_TOP_P_RENORM_LIST (H100, A B A B in one machine start; history/ab-sampling-
// top-p-renorm-list-18f704a-h100.txt): 128 x 128256 peaked 91.3 -> 81.5 us (0.885x), sharp
// 0.938x, 512 x 128256 peaked / sharp 0.868x / 0.902x; flat rows and vocab 32000 0.997-1.017x.
template <typename Scope, typename = void>
struct ListsKeptSet {
  static constexpr bool value = false;
};
template <typename Scope>
struct ListsKeptSet<Scope, decltype(void(Scope::kListsKeptSet))> {
  static constexpr bool value = Scope::kListsKeptSet;
};

// The gather pass after level 0 found its crossing in bin `digit`: the keys and positions of
// that bin's elements go to `space`, and with space.segments (and a normal largest key,
// top_bin's) the draw's segment masses of every key in a higher bin, in the unit
// inverse_cdf_draw would use (FixedPointScale::of the largest key's exponent). A warp whose
// slice overflows drops the list (the search then reads the row, as without gathering).
template <typename Scope, typename KeyFn, typename Sh>
__device__ GatherResult gather_crossing_bin(const Scope& scope, KeyFn key_of, std::uint32_t digit,
                                            std::uint32_t top_bin, std::int64_t n, Sh& sh, bool above_too = false) {
  // (ListsKeptSet scopes: with above_too, the bins above `digit` too.)
  const std::uint32_t span = above_too ? ~digit : 0u;
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  const std::uint32_t field = Sh::top_exponent_field(top_bin);
  // The segment sums only where every key above the gathered bin is normal and its mass does
  // not underflow (FixedPointScale::normal_from the bin's exponent field), so that each such
  // key's mass is FixedPointScale::normal_mass: one add where mass() has two multiplies. With
  // this (and mass() still branching per key) flat top-p at 128 x 128256 took 0.890x the time
  // (results/history/ab-sampling-gather-fast-mass-135707e.txt). Other rows (rare: a crossing
  // among subnormals, or more than ~170 binades below the largest) leave the sums to the
  // draw's own pass, as a subnormal largest key does.
  const FixedPointScale fx = FixedPointScale::of(field << 23, n);
  const std::uint32_t digit_field = Sh::exponent_field(digit);
  const bool fuse = Scope::kGathers == GatherMode::kSearchAndDraw && space.segments != nullptr && field != 0u &&
                    fx.normal_from(digit_field);
  const std::uint32_t offset = fx.normal_offset();
  std::uint32_t count = 0;  // this warp's (sh.gather_overflow was cleared with level 0's bins)
  const SegmentLayout layout = SegmentLayout::of(scope.local_groups(), Sh::kDrawSegments);
  segment_pass(scope, layout, fuse ? space.segments : nullptr, [&](std::int64_t g, const float (&v)[4]) {
    std::uint64_t above = 0;
    std::uint32_t k[4];
    unsigned match = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k[j] = key_of(v[j]);  // NaN (past the end) gives key 0
      const std::uint32_t bin = k[j] >> Sh::shift(0);
      if (k[j] != 0u && bin - digit <= span) match |= 1u << j;  // (span 0: bin == digit)
      if (fuse && bin > digit) above += FixedPointScale::normal_mass(k[j], offset);
    }
    gather_append_group(space, count, match, k, static_cast<std::uint32_t>(4 * g));
    return above;
  });
  if ((threadIdx.x & 31) == 0) {
    sh.gathered[threadIdx.x >> 5] = count;
    if (count > space.slice) sh.gather_overflow = 1;
  }
  __syncthreads();
  const bool listed = sh.gather_overflow == 0;
  return GatherResult{listed, listed && fuse};
}

// Whether a scope's count searches end in one warp once a crossing bin holds at most 32 keys
// (finish_in_warp): scopes one CTA holds whole in shared memory (Scope::kFinishesInWarp:
// cluster_local_top_k.cuh's LocalScope<true>, a CTA's slice or rank 0's list), where listing a
// bin's keys is a pass over shared memory.
template <typename Scope, typename = void>
struct FinishesInWarp {
  static constexpr bool value = false;
};
template <typename Scope>
struct FinishesInWarp<Scope, decltype(void(Scope::kFinishesInWarp))> {
  static constexpr bool value = Scope::kFinishesInWarp;
};

// The end of a count search (radix_threshold) whose crossing bin (the keys matching `prefix`
// under `prefix_mask`) holds at most 32 keys, in a scope one CTA holds whole: the key and
// count its remaining levels would find. One pass lists the bin's keys into shared memory,
// and warp 0 counts for each the bin's keys >= it: the key is the largest whose count, with
// the `above` keys of higher bins, reaches the goal. Three block barriers where a level has
// about six. Session 33 (dev/NOTES.md item 65): the top-k sampler 0.91-0.95x at 1 and 16 x
// 32000 (history/ab-sampling-no-warp-finish-d9e359b7e.txt). Searches with masses keep their
// levels: finishing them too (mantissa sums per key, where the bin's shift is exact) made the
// joint sampler 1.00-1.05x, its list kernel spilling more
// (history/ab-sampling-list-warp-finish-02393fc01.txt).
template <typename Scope, typename KeyFn, typename Sh>
__device__ Threshold finish_in_warp(const Scope& scope, KeyFn key_of, std::uint32_t prefix, std::uint32_t prefix_mask,
                                    std::uint64_t goal, std::uint64_t above, Threshold partial, Sh& sh) {
  // Its own shared memory, so that RadixShared (every kernel's layout) stays as it was.
  __shared__ std::uint32_t bin_keys[32];
  __shared__ int listed;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();  // (the crossing's readers of sh are done too: warp 0 writes sh.digit below)
  scope.for_each_group(NAN, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::uint32_t k = key_of(v[j]);
      if (k != 0u && (k & prefix_mask) == prefix) {
        const int at = atomicAdd(&listed, 1);
        if (at < 32) bin_keys[at] = k;
      }
    }
  });
  __syncthreads();
  if (threadIdx.x < 32) {
    const std::uint32_t mine = static_cast<int>(threadIdx.x) < min(listed, 32) ? bin_keys[threadIdx.x] : 0u;
    std::uint32_t ge = 0;  // the bin's keys >= mine
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const std::uint32_t other = __shfl_sync(0xFFFFFFFFu, mine, j);
      ge += (other != 0u && other >= mine) ? 1u : 0u;
    }
    const bool reaches = mine != 0u && above + ge >= goal;
    std::uint32_t key = reaches ? mine : 0u;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, d));
    // The crossing bin reaches the goal, so some key does; the lowest lane holding it records it.
    const unsigned holders = __ballot_sync(0xFFFFFFFFu, reaches && mine == key);
    if (static_cast<int>(threadIdx.x) == __ffs(holders) - 1) {
      sh.digit = key;
      sh.above_count = above + ge;
    }
  }
  __syncthreads();
  partial.key = sh.digit;
  partial.count_ge = sh.above_count;
  return partial;
}

// Searches the row of `scope` (row_scope.cuh) for the largest key B with
//   (by count) #{key >= B} >= target.count, or (by mass) mass{key >= B} >= goal,
// goal = max(1, ceil(p * base)) (mass_goal). KeyFn(float) -> key (0: not a participant); with
// masses, keys are probability keys (prob_key). Sh: a RadixShared layout (SliceRadixSharedOf
// for SliceScopeOf). With Scope::kGathers, levels 1 and 2 may read the crossing bin of level 0
// from shared memory instead of the row, when it fits (gather_crossing_bin); with
// GatherMode::kHeadBound a count search's level 0 lists them as it reads the row
// (head_bound_list.cuh).
// kPeelLevel0 = false keeps level 0 in the shared loop where the scope peels it (top_k_select:
// its 32 registers let two 1024-thread CTAs share an SM, and the peeled loop took it to 50).
// kDenseLevel0 = false: few keys may take part in level 0 (the joint sampler's top-p search,
// whose keys below the top-k floor do not), so the peeled level 0 keeps the branches that skip
// a non-participant's atomics there (branch-free, that search's peaked rows ran 1.02-1.06x
// slower: each non-participant paid three atomics; history/ab-sampling-branchless-level0-a1ffd14.txt).
// kFractionSums: the histograms outside the dense peeled level 0 (which always sums fractions,
// add_to_level0) sum fractions too (histogram_mass). The two-search kernels pass false: with
// fractions everywhere they ran 1.01-1.15x slower (row) and 1.04-1.08x (cluster) where every
// other kernel ran 0.95-1.01x (history/ab-sampling-fraction-sums-e794967.txt), and still
// 1.01-1.08x with the row loads that ptxas had sunk pinned in place
// (history/ab-sampling-joint-fraction-sums-pinned-d1814fd.txt; dev/NOTES.md items 60-61).
template <bool kPeelLevel0 = true, bool kDenseLevel0 = true, bool kFractionSums = true, typename Scope,
          typename KeyFn, typename Sh>
__device__ Threshold radix_threshold(const Scope& scope, KeyFn key_of, SearchTarget target, Sh& sh) {
  constexpr bool kPeel = kPeelLevel0 && Scope::kPeelsLevel0;
  const bool masses = target.by_mass || target.track_mass;
  bool listed = false;  // this level reads the gathered keys (listed_count of this warp's)
  std::uint32_t listed_count = 0;
  if constexpr (Scope::kGathers == GatherMode::kKeptSet || Scope::kGathers == GatherMode::kHeadBound) {
    listed = target.from_list;
    listed_count = listed ? sh.gathered[threadIdx.x >> 5] : 0u;
  }
  bool segments_ready = false;
  constexpr bool kHeadBound = Scope::kGathers == GatherMode::kHeadBound;
  int head_units = 0;             // kHeadBound: level 0 lists (head_bound_list.cuh)
  std::uint32_t head_listed = 0;  // and this warp's list after the head
  bool kept_listed = false;       // and it holds the kept set (Threshold::kept_listed)
  bool kept_whole_bin = false;    // a level found no crossing (Threshold::kept_whole_bin)
  std::uint32_t prefix = 0, prefix_mask = 0;
  std::uint64_t above_count = 0, above_mass = 0, bin_count = 0, bin_mass = 0, all_mass = 0;
  std::uint64_t goal = target.count;
  std::uint32_t top_bin = 0;
  int base = 0;

  for (int level = 0; level < 3; ++level) {
    const int shift = Sh::shift(level), bins = Sh::bins(level);
    scope.level_start(level, sh);  // the previous level's readers of sh (in any CTA of the scope) are done
    for (int i = threadIdx.x; i < bins; i += blockDim.x) {
      sh.count[i] = 0;
      sh.mass_lo[i] = 0;
      sh.mass_hi[i] = 0;
    }
    if (threadIdx.x == 0) {
      sh.found = 0;
      sh.gather_overflow = 0;  // (read only after a gather pass, which follows level 0)
    }
    __syncthreads();
    auto add = [&](std::uint32_t k) {
      const bool takes_part = k != 0u && (k & prefix_mask) == prefix;
      const std::uint32_t d = (k >> shift) & static_cast<std::uint32_t>(bins - 1);
      const std::uint64_t q = takes_part && masses ? histogram_mass<kFractionSums>(k) : 0;
      add_to_histogram(sh, takes_part, d, q);
    };
    // Level 0 has no prefix: every participant takes part, and its bin is its top kBits. The
    // level loop is not unrolled, so `add` would test a prefix and shift by a run-time amount
    // there too; the scopes with kPeelsLevel0 run level 0's pass with this instead (the
    // others with `add`).
    auto add0 = [&](std::uint32_t k) {
      if constexpr (kPeel) {
        if constexpr (kDenseLevel0) {
          add_to_level0(sh, k, k >> Sh::shift(0), masses);
          return;
        }
        const bool takes_part = k != 0u;
        const std::uint32_t d = k >> Sh::shift(0);
        const std::uint64_t q = takes_part && masses ? histogram_mass<kFractionSums>(k) : 0;
        add_to_histogram(sh, takes_part, d, q);
      } else {
        add(k);
      }
    };
    if constexpr (kHeadBound) {
      // (sh.gather_sizes is read only after the level's first barrier.)
      if (level == 0 && !target.by_mass) {
        head_units = head_bound_units(target.count, 4 * scope.local_groups(), sh.gather_sizes.capacity);
      }
    }
    if (Scope::kGathers != GatherMode::kOff && listed) {
      const GatherSpace gather = GatherSpace::of(sh.gather_sizes);
      const std::uint32_t* keys = gather.keys + gather.slice_begin;
      for (std::uint32_t i = threadIdx.x & 31; i < listed_count; i += 32) {
        add(keys[i] >= target.list_floor ? keys[i] : 0u);
      }
    } else if (kHeadBound && head_units > 0) {  // level 0
      head_listed = level0_with_list(scope, key_of, add0, target.count, head_units, shift, sh);
    } else if (kPeel && level == 0) {
      scope.for_each_group(NAN, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
        for (int j = 0; j < 4; ++j) add0(key_of(v[j]));  // the NaN fill of a tail gives key 0
      });
    } else {
      scope.for_each_group(NAN, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
        for (int j = 0; j < 4; ++j) add(key_of(v[j]));  // the NaN fill of a tail gives key 0
      });
    }
    const bool want_top = level == 0 && (masses || target.want_top);
    scope.complete_histograms(sh, bins, want_top);  // (a cluster's: summed into each CTA's share)

    // Descending scan of this CTA's share of the bins (all of them for RowScope): thread t
    // owns `per` consecutive bins from top = last-per*t down (those >= first); shares of
    // higher bins come before. The bins are summed, the sums scanned, and the bins read
    // again (shared memory) by the thread whose run crosses the goal.
    const int first = scope.share_first(bins), last = scope.share_last(bins);
    const int span = last - first + 1;
    const int per = (span + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int top = last - per * static_cast<int>(threadIdx.x);
    const int bottom = max(top - per + 1, first);  // my bins: bottom .. top (none if top < first)
    if (want_top) {
      top_bin = scope.top_bin(sh, bins, top, bottom);
      base = search_mass_base(Sh::top_exponent_field(top_bin), target.row_length);
    }
    // A bin's mass: its mantissa sum shifted once by its exponent (level 0: the bin's own
    // exponent field; later levels split one level-0 bin, whose exponent the prefix holds).
    auto bin_mass_of = [&](int bin) -> std::uint64_t {
      if (!masses) return 0;
      const std::uint32_t field = level == 0 ? Sh::exponent_field(static_cast<std::uint32_t>(bin)) : prefix >> 23;
      std::uint64_t sum = scope.combined_mass(sh, bin, bins);
      // This level's histogram summed fractions (histogram_mass): add the implicit bits.
      const bool fractions = kFractionSums || (kPeel && kDenseLevel0 && level == 0);
      if (fractions && field > 0) sum += scope.combined_count(sh, bin, bins) << 23;
      return shifted_mass(sum, static_cast<int>(field > 0 ? field : 1) + base);
    };
    std::uint64_t c_sum = 0, m_sum = 0;
    for (int bin = top; bin >= bottom; --bin) {
      c_sum += scope.combined_count(sh, bin, bins);
      m_sum += bin_mass_of(bin);
    }
    std::uint64_t share_count, share_mass;
    std::uint64_t before_c, before_m;
    block_exclusive_scan_pair(c_sum, m_sum, &before_c, &before_m, &share_count, &share_mass);
    const ShareTotals tot = scope.across(sh, share_count, share_mass);
    if (level == 0) {
      all_mass = tot.all_mass;
      if (target.by_mass) goal = mass_goal(target.mass_fraction, target.mass_base ? target.mass_base : tot.all_mass);
      const std::uint64_t total = target.by_mass ? tot.all_mass : tot.all_count;
      if (total < goal) {
        // Fewer participants (or less mass) than the target: keep them all.
        return Threshold{0u, tot.all_count, tot.all_mass, tot.all_mass, top_bin, base};
      }
    }
    std::uint64_t run_c = above_count + tot.higher_count + before_c, run_m = above_mass + tot.higher_mass + before_m;
    if (top >= first && (target.by_mass ? run_m : run_c) < goal &&
        (target.by_mass ? run_m + m_sum : run_c + c_sum) >= goal) {  // exactly one thread
      for (int bin = top; bin >= bottom; --bin) {
        const std::uint64_t c = scope.combined_count(sh, bin, bins), m = bin_mass_of(bin);
        if ((target.by_mass ? run_m + m : run_c + c) >= goal) {
          scope.set_crossing(sh, Crossing{static_cast<std::uint32_t>(bin), run_c, run_m, c, m});
          break;
        }
        run_c += c;
        run_m += m;
      }
    }
    // Every CTA of the scope now holds the crossing. None is found only where a deep bin's
    // floored mass exceeds the sum of its floored parts (a crossing more than S - 24 binades
    // below the largest probability); the prefix found so far is then kept (the whole bin).
    if (!scope.publish_crossing(sh)) {
      kept_whole_bin = true;
      break;
    }
    prefix |= sh.digit << shift;
    prefix_mask |= static_cast<std::uint32_t>(bins - 1) << shift;
    above_count = sh.above_count;
    above_mass = sh.above_mass;
    bin_count = sh.bin_count;
    bin_mass = sh.bin_mass;
    // Level 0 listed every key of the crossing bin and above but the head's: add those (before
    // the early exit, which keeps the bin whole, so the list then holds the kept set).
    if constexpr (kHeadBound) {
      if (head_units > 0) {
        listed = sh.gather_overflow == 0 &&
                 list_head_from_crossing_bin(scope, key_of, head_units, Sh::shift(0), sh.digit, head_listed, sh);
        listed_count = sh.gathered[threadIdx.x >> 5];
        kept_listed = listed;
        head_units = 0;
      }
    }
    // Early exit: when the crossing bin is kept whole (it holds only the crossing element,
    // or by count it fills the target exactly), "keep keys >= the bin's lowest key" is
    // already the exact kept set, and the remaining passes over the row are skipped (the
    // usual case for top-k after level 1). The key is then the bin's lower bound, not an
    // element's key; no element lies between the two, so every "key >= B" test is unchanged.
    // The decision is uniform across the scope (every CTA holds the same crossing).
    if (!target.exact_key && level < 2 &&
        (bin_count == 1 || (!target.by_mass && above_count + bin_count == goal))) {
      break;
    }
    // (`enough > 0` first, so that searches without it compile to the code they had.)
    if (target.enough > 0 && !target.by_mass && level < 2 && above_count + bin_count <= target.enough) break;
    if constexpr (FinishesInWarp<Scope>::value) {
      if (!masses && level < 2 && bin_count <= 32) {
        return finish_in_warp(scope, key_of, prefix, prefix_mask, goal, above_count,
                              Threshold{prefix, 0, 0, all_mass, top_bin, base}, sh);
      }
    }
    // Levels 1 and 2 read the crossing bin from shared memory when it fits there, with a
    // quarter to spare: each warp fills its own slice, about bin_count / warps of it (a warp
    // whose slice overflows drops the list). At half rather than 3/4, flat top-p at 512 x
    // 128256 missed its bin (~6500 keys in ~10K entries; sample_launch.cu's gather_share).
    if constexpr (Scope::kGathers == GatherMode::kSearch || Scope::kGathers == GatherMode::kSearchAndDraw) {
      if (level == 0 && bin_count <= sh.gather_sizes.capacity / 4 * 3) {
        bool above_too = false;
        if constexpr (ListsKeptSet<Scope>::value) above_too = above_count + bin_count <= sh.gather_sizes.capacity / 4 * 3;
        const GatherResult r = gather_crossing_bin(scope, key_of, sh.digit, top_bin, target.row_length, sh, above_too);
        listed = r.listed;
        segments_ready = r.segments;
        listed_count = sh.gathered[threadIdx.x >> 5];
        if constexpr (ListsKeptSet<Scope>::value) {
          // The list holds every key >= the bin's lowest (levels 1-2 skip those above by
          // their prefix): the output may be filled now, and written from the list later.
          kept_listed = above_too && listed;
          if (kept_listed) scope.after_listing_read();
        }
      }
    }
  }
  return Threshold{prefix, above_count + bin_count, above_mass + bin_mass, all_mass, top_bin, base, segments_ready,
                   kept_listed, above_mass, kept_whole_bin};
}

}  // namespace aotinfer::sampling
