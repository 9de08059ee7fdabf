// Row kernels of the sampling family: filtered sampling (fixed-point inverse CDF /
// Gumbel-max), top-k / top-p renormalisation and top-k logit masking. One CTA of kRowThreads
// per output row; filters come from radix_threshold.cuh, the draw from inverse_cdf.cuh,
// randomness from philox.cuh. The top-k and top-p samplers and top-p renormalisation may
// gather a search's crossing bin into shared memory (gather.cuh); each filter family is its
// own kernel instance (FilterFamily), so a kernel holds only the searches it runs.
//
// Sampling from probabilities draws from the kept tokens by the inverse CDF of their
// fixed-point masses with one 64-bit uniform per output row: exact for the renormalised
// distribution, without sorting and without normalising first. Sampling from logits is an
// exponential race in log space (Gumbel-max: argmax_i x_i - log(E_i), E_i ~ Exp(1)).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "../common/pdl.cuh"
#include "inverse_cdf.cuh"
#include "kept_set_list.cuh"
#include "philox.cuh"
#include "radix_threshold.cuh"
#include "row_access.cuh"
#include "sampling_launchers.h"
#include "top_p_rejection.cuh"

namespace aotinfer::sampling {

// Which filter modes a kernel instance serves (its searches are compiled for those only:
// fewer registers, and the gathering kernels spill less). kOneSearch: none, min-p, top-k or
// top-p (the cluster kernels' top-k and top-p); kNoSearch: min-p (and logits); kTopK / kTopP:
// that filter (or none, where it keeps everything); kTwoSearches: top-k then top-p, and joint;
// kTopPRejection: top-p by rejection (top_p_rejection.cuh), no search at all, and plain
// sampling (p = 1);
// kTopPRejectionBinned: the same draws, its rounds tested by bins where they can be (row
// kernels only, top_p_rejection.cuh's RejectionBins).
enum class FilterFamily { kOneSearch, kNoSearch, kTopK, kTopP, kTwoSearches, kTopPRejection, kTopPRejectionBinned };

// What a family's kernels gather (gather.cuh), for the kernels and their launcher alike: the
// top-k and top-p samplers their bin and the draw's segments, the two-search sampler its top-k
// set (kept_set_list.cuh), top-p renormalisation its bin. With `lists` (the top-k and
// two-search samplers where rows do not stay in L1 between passes: launch_sample_rows), level
// 0 of the top-k search lists its candidates (head_bound_list.cuh), and the later levels, the
// top-p search and the draw read that list: about one pass over the row in all.
constexpr GatherMode sampler_gather(FilterFamily f, bool lists = false) {
  if (lists) return GatherMode::kHeadBound;
  if (f == FilterFamily::kTwoSearches) return GatherMode::kKeptSet;
  return f == FilterFamily::kTopK || f == FilterFamily::kTopP ? GatherMode::kSearchAndDraw : GatherMode::kOff;
}
constexpr GatherMode renorm_gather(FilterFamily f) {
  return f == FilterFamily::kTopP ? GatherMode::kSearch : GatherMode::kOff;
}

struct FilterParams {
  FilterMode mode;
  const std::int32_t* top_k_array;  // (rows,) or nullptr
  std::int32_t top_k;
  const float* top_p_array;
  float top_p;
  const float* min_p_array;
  float min_p;
};

struct RandomParams {
  const std::uint64_t* seed_array;  // (1,) or (batch,) or nullptr
  std::int64_t seed_length;
  std::uint64_t seed;
  const std::uint64_t* offset_array;
  std::int64_t offset_length;
  std::uint64_t offset;

  __device__ __forceinline__ RowRandom for_row(std::int64_t b, std::uint32_t stream) const {
    const std::uint64_t s = seed_array ? seed_array[seed_length == 1 ? 0 : b] : seed;
    const std::uint64_t o = offset_array ? offset_array[offset_length == 1 ? 0 : b] : offset;
    return RowRandom(s, o, static_cast<std::uint32_t>(b), stream);
  }
};

struct SampleParams {
  const float* input;  // (rows, vocab)
  std::int64_t rows, vocab, row_stride;
  const void* indices;  // (batch,) int32/int64 or nullptr
  bool indices_int64;
  std::int64_t batch;
  void* samples;  // (batch,) int32/int64
  bool samples_int64;
  bool* valid;  // (batch,) or nullptr
  bool input_is_logits;
  FilterParams filter;
  RandomParams random;
  GatherSizes gather;
};

template <typename T>
struct RowFilterParams {  // renorm and mask
  const T* input;
  T* out;
  std::int64_t rows, vocab, in_row_stride, out_row_stride;
  FilterParams filter;
  GatherSizes gather;
};

namespace detail {

__device__ __forceinline__ std::int64_t source_row(const void* indices, bool is64, std::int64_t b) {
  if (indices == nullptr) return b;
  return is64 ? static_cast<const std::int64_t*>(indices)[b]
              : static_cast<const std::int32_t*>(indices)[b];
}

// Row `row`'s top-k parameter (the per-row tensor where one is given).
__device__ __forceinline__ std::int32_t row_top_k(const FilterParams& f, std::int64_t row) {
  return f.top_k_array ? f.top_k_array[row] : f.top_k;
}

// The key every kept probability reaches and the key of the largest one (any: the row has a
// participant). Renormalisation also gets the fixed-point mass of the kept set and its unit
// (a mass q stands for q * 2^-(150 + base), fixed_point.cuh).
struct KeptSet {
  std::uint32_t min_key;
  std::uint32_t max_key;
  std::uint64_t mass;
  int base;
  bool any;
  // The draw's segments hold the kept masses the list does not (draw_after_gather): the search's
  // gather pass summed those above its bin (gather.cuh), or the list holds every kept key and
  // the segments are zero (GatherMode::kKeptSet; kHeadBound in filtered_draw).
  bool segments_ready = false;
  // Threshold::kept_listed of the top-k search, which decided the kept set (or, after a top-p
  // search within it, holds it: GatherMode::kHeadBound samplers).
  bool listed = false;
  // No filter in effect (a top-k or top-p filter that keeps everything; not min-p): the draw
  // takes the fixed unit where it holds, as plain sampling's one-pass draw does
  // (top_p_rejection_draw with p = 1), so that a filter that filters nothing draws the plain
  // token (reference draw_unit_keys).
  bool unfiltered = false;

  // The key whose unit the draw takes.
  __device__ __forceinline__ std::uint32_t draw_unit_key(std::int64_t n) const {
    return unfiltered && FixedPointScale::rejection_unit_holds(max_key, n) ? FixedPointScale::kRejectionUnitKey
                                                                           : max_key;
  }
};

// The kept set as far as the row's first search (t, which found a participant) tells it: the
// masses' unit, and the largest key's stand-in for the draw's unit (FixedPointScale::of):
// level 0's highest bin gives its exponent field, and every normal key of that exponent gives
// the same unit. A subnormal largest key (field 0) needs its own mantissa length: that rare
// row reads its maximum.
template <typename Sh, typename Scope>
__device__ KeptSet kept_after_first_search(const Scope& scope, const Threshold& t) {
  const std::uint32_t field = Sh::top_exponent_field(t.top_bin);
  return KeptSet{0u, field != 0u ? field << 23 : largest_key(scope), 0, t.mass_base, true, t.segments_ready};
}

// kTwoSearches: the filter may be top-k-then-top-p or joint (two threshold searches). Only
// those modes' kernels carry that code: in one kernel for every mode, its registers made the
// cluster kernel's top-k 2-5 us slower (8f72820, 759f5f3).
//
// No pass over the row precedes the searches: the first one's level 0 finds the largest key's
// exponent, which fixes the masses' unit (radix_threshold.cuh). Min-p, and a top-k or top-p
// filter that filters nothing, read the row's maximum instead.
//
// kFamily: the filter modes the caller's kernel serves (FilterFamily); only their searches are
// compiled.
template <FilterFamily kFamily = FilterFamily::kOneSearch, typename Scope, typename Sh>
__device__ KeptSet prob_filter(const Scope& scope, std::int64_t n, const FilterParams& f, std::int64_t row,
                               bool need_mass, Sh& sh) {
  constexpr bool kTwoSearches = kFamily == FilterFamily::kTwoSearches;
  // The two-search cluster kernel keeps level 0 in the shared loop: peeled (with the fraction
  // sums it then had) it ran 0.997-1.037x (history/ab-sampling-slice-peel-e794967.txt).
  constexpr bool kPeelSearch = !(kTwoSearches && Scope::kSplitOverCluster);
  // Mantissa sums in the two-search kernels (radix_threshold's kFractionSums): with fraction
  // sums they ran 1.01-1.15x slower (history/ab-sampling-fraction-sums-e794967.txt), and
  // 1.01-1.08x with the row loads pinned where ptxas had sunk them
  // (history/ab-sampling-joint-fraction-sums-pinned-d1814fd.txt; dev/NOTES.md items 60-61).
  constexpr bool kFractionSums = !kTwoSearches;
  constexpr bool kMayTopK = kFamily != FilterFamily::kNoSearch && kFamily != FilterFamily::kTopP;
  constexpr bool kMayTopP = kFamily != FilterFamily::kNoSearch && kFamily != FilterFamily::kTopK;
  const std::int32_t k = row_top_k(f, row);
  const float p = f.top_p_array ? f.top_p_array[row] : f.top_p;
  const float min_p = f.min_p_array ? f.min_p_array[row] : f.min_p;
  const bool use_k = kMayTopK &&
                     (f.mode == FilterMode::kTopK || f.mode == FilterMode::kTopKThenTopP ||
                      f.mode == FilterMode::kJoint) && k > 0 && k < n;
  const bool use_p = kMayTopP &&
                     (f.mode == FilterMode::kTopP || f.mode == FilterMode::kTopKThenTopP ||
                      f.mode == FilterMode::kJoint) && p < 1.f;
  KeptSet kept{0u, 0u, 0, 0, false};
  if (!use_k && !use_p) {
    // Min-p, or a filter that keeps everything (plain sampling draws by rejection with p = 1,
    // but would take this branch too): the draw needs only the largest key (its fixed-point
    // unit, or the fixed unit: KeptSet::unfiltered), min-p its value.
    const std::uint32_t mx = largest_key(scope);
    if (mx == 0u) return kept;
    kept = KeptSet{1u, mx, 0, search_mass_base(mx >> 23, n), true};
    kept.unfiltered = !need_mass && f.mode != FilterMode::kMinP;  // (renormalisation draws nothing)
    if (f.mode == FilterMode::kMinP) {
      kept.min_key = prob_key(min_p * __uint_as_float(mx));
      if (kept.min_key == 0u) kept.min_key = 1u;  // min_p * max underflowed: keep every participant
    }
    if (need_mass) {
      // Renormalisation without a filter: the mass of every participant, in the searches'
      // unit (per element here; a search floors a bin more than S - 24 binades down as a whole).
      const FixedPointScale unit = FixedPointScale::from_base(kept.base);
      std::uint64_t local = 0;
      scope.for_each_group(0.f, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const std::uint32_t kk = prob_key(v[j]);
          if (kk >= kept.min_key) local += unit.mass(kk);
        }
      });
      kept.mass = scope.reduce(local, SumOp{}, std::uint64_t{0});
    }
    return kept;
  }
  // Keys below `floor_key` take no part (0 for every search but top-p after top-k, below).
  // One key function for all searches: a second instantiation of radix_threshold doubled
  // the cluster kernel's register spills and slowed its top-k by 5 us (759f5f3).
  std::uint32_t floor_key = 0u;
  auto key_of = [&floor_key](float v) {
    const std::uint32_t kk = prob_key(v);
    return kk >= floor_key ? kk : 0u;
  };
  std::uint32_t key = 0u;
  std::uint64_t mass_k = 0, all_mass = 0, mass = 0, count_k = 0;
  if (use_k) {
    // The top-k set's mass matters only to renormalisation and to a top-p search after it;
    // a plain top-k draw skips the two mass atomics per participant (128 x 128256: 100.5 ->
    // 95.4 us flat, 93.8 -> 89.7 peaked; history/sampling-54f5f53-top-k-no-mass.md).
    const bool k_mass = need_mass || (kTwoSearches && use_p);
    SearchTarget target{false, static_cast<std::uint64_t>(k), 0.f, 0, k_mass};
    target.want_top = true;
    target.row_length = n;
    const Threshold t = radix_threshold<kPeelSearch, true, kFractionSums>(scope, key_of, target, sh);
    if (t.top_bin == 0) return kept;  // no participant
    kept = kept_after_first_search<Sh>(scope, t);
    kept.listed = t.kept_listed;
    key = t.key;
    count_k = t.count_ge;
    mass_k = t.mass_ge;
    all_mass = t.all_mass;
    mass = t.mass_ge;
  }
  if (use_p) {
    // With top-k first the top-p threshold t_p (goal p * mass_k) is never below t_k, and in
    // joint mode (goal p * all) it is below t_k exactly when the top-k set's mass falls short
    // of the goal, which then leaves t_k in force with no top-p search at all. Otherwise only
    // the top-k set can hold t_p, so the search counts its elements alone: the same t_p (the
    // masses at and above t_k are unchanged), without the histogram traffic of the rest of
    // the row. The kept set is exactly the one of two full searches.
    std::uint64_t base = 0;
    bool search = true;
    if constexpr (kTwoSearches) {
      if (f.mode == FilterMode::kTopKThenTopP) base = mass_k;
      if (use_k && f.mode == FilterMode::kJoint) {
        search = mass_k >= mass_goal(fmaxf(p, 0.f), all_mass);  // the search's own goal
        base = all_mass;
      }
      floor_key = key;  // t_k, or 0 without top-k
    }
    if (search) {
      SearchTarget target{true, 0, fmaxf(p, 0.f), base, true};
      target.row_length = n;
      if constexpr (kTwoSearches && Scope::kGathers == GatherMode::kHeadBound) {
        // The top-k search's list holds every key >= t_k (and more of its level-0 bin): the
        // top-p search reads it with t_k as the floor, and the draw then reads it too.
        target.from_list = kept.listed;
        target.list_floor = key;
      } else {
        kept.listed = false;  // the top-k search's list is not this search's kept set
      }
      if constexpr (Scope::kGathers == GatherMode::kKeptSet) {
        // List the top-k set where it should fit: half the list, so that a warp's slice
        // overflows only where the kept keys crowd into its segments (kept_set_list.cuh).
        if (use_k && key != 0u && count_k <= sh.gather_sizes.capacity / 2) {
          target.from_list = list_kept_set(scope, key, sh);
          kept.segments_ready = target.from_list;  // the draw's segments are zero, the list holds the rest
        }
      }
      const Threshold t = radix_threshold<kPeelSearch, !kTwoSearches, kFractionSums>(scope, key_of, target, sh);
      floor_key = 0u;
      if (!use_k) {
        if (t.top_bin == 0) return kept;  // no participant
        kept = kept_after_first_search<Sh>(scope, t);
        if constexpr (ListsKeptSet<Scope>::value) kept.listed = t.kept_listed;
      }
      if (t.key >= key) {
        key = t.key;
        mass = t.mass_ge;
      }
    }
  }
  kept.min_key = key;
  kept.mass = mass;  // the kept set's (when need_mass: every search above tracked masses)
  return kept;
}

// The filter, then the inverse-CDF draw over the kept probabilities of the scope's row (see
// inverse_cdf_draw for what each CTA gets back).
// With GatherMode::kSearchAndDraw (filters of one search: the draw follows that search), the
// search's gather pass may have summed the draw's segments already; the gathered bin's kept
// keys are then added in shared memory and the draw needs no pass of its own.
template <FilterFamily kFamily, typename Scope, typename Sh>
__device__ std::int64_t filtered_draw(const Scope& scope, std::int64_t n, const FilterParams& f, std::int64_t row,
                                      const RowRandom& rng, Sh& sh) {
  static_assert(kFamily != FilterFamily::kTwoSearches || Scope::kGathers != GatherMode::kSearchAndDraw,
                "the first of two searches is not the draw's");
  KeptSet kept = prob_filter<kFamily>(scope, n, f, row, false, sh);
  if (!kept.any) return -1;  // the same in every CTA of the scope
  if constexpr (Scope::kGathers == GatherMode::kHeadBound) {
    // The list holds the kept set and no pass summed segments: the draw adds every kept key.
    if (kept.listed) {
      zero_segments(sh.gather_sizes);
      kept.segments_ready = true;
    }
  }
  if constexpr (Scope::kGathers == GatherMode::kSearchAndDraw || Scope::kGathers == GatherMode::kKeptSet ||
                Scope::kGathers == GatherMode::kHeadBound) {
    if (kept.segments_ready) {
      return draw_after_gather(scope, n, kept.min_key, kept.max_key, sh.gather_sizes, sh.gathered[threadIdx.x >> 5],
                               rng);
    }
  }
  return inverse_cdf_draw(scope, n, kept.min_key, kept.draw_unit_key(n), rng, sh);
}

// The draw of a FilterFamily::kTopPRejection kernel (top-p mode only): top_p_rejection_draw
// with the row's top_p, where NaN and top_p >= 1 (no filter) become 1, whose goal is the
// row's total: round 0, the unfiltered draw, is then always accepted.
template <bool kBinnedTest, typename Scope, typename Sh>
__device__ std::int64_t top_p_rejection_row(const Scope& scope, std::int64_t n, const FilterParams& f,
                                            std::int64_t row, const RowRandom& rng, Sh& sh) {
  const float p = f.top_p_array ? f.top_p_array[row] : f.top_p;
  return top_p_rejection_draw<kBinnedTest>(scope, n, p < 1.f ? p : 1.f, rng, sh);
}

// The sampler of filter family kFamily over the scope's row (every CTA of the scope calls it).
template <FilterFamily kFamily, typename Scope, typename Sh>
__device__ std::int64_t family_draw(const Scope& scope, std::int64_t n, const FilterParams& f, std::int64_t row,
                                    const RowRandom& rng, Sh& sh) {
  if constexpr (kFamily == FilterFamily::kTopPRejection || kFamily == FilterFamily::kTopPRejectionBinned) {
    return top_p_rejection_row<kFamily == FilterFamily::kTopPRejectionBinned>(scope, n, f, row, rng, sh);
  } else {
    return filtered_draw<kFamily>(scope, n, f, row, rng, sh);
  }
}

// The top-k search over the row's logits: Threshold::key, the smallest ordered key of the top k
// (0 and no list where no search runs: keep all), and with GatherMode::kHeadBound whether the
// list holds the kept set (kept_listed).
// (No gather pass: a top-k search mostly stops after level 1, so the gather pass would only
// replace that pass, at a higher cost per element; measured 1.0-1.09x slower. The listing
// kernels' level 0 lists the candidates as it reads the row instead: head_bound_list.cuh.)
template <typename Scope, typename Sh>
__device__ Threshold top_k_logit_threshold(const Scope& scope, std::int64_t n, const FilterParams& f,
                                           std::int64_t row, Sh& sh) {
  const std::int32_t k = row_top_k(f, row);
  if (!(k > 0 && k < n)) return Threshold{0u, 0, 0, 0, 0, 0};
  auto key_of = [](float v) { return ordered_key(v); };
  return radix_threshold(scope, key_of, SearchTarget{false, static_cast<std::uint64_t>(k), 0.f, 0, false}, sh);
}

// The smallest ordered key of the row's top-k logits (0: keep all). (Its own body, not
// top_k_logit_threshold(...).key: that changed the code of the mask kernels that do not list.)
template <typename Scope, typename Sh>
__device__ std::uint32_t top_k_logit_key(const Scope& scope, std::int64_t n, const FilterParams& f, std::int64_t row,
                                         Sh& sh) {
  const std::int32_t k = row_top_k(f, row);
  if (!(k > 0 && k < n)) return 0u;
  auto key_of = [](float v) { return ordered_key(v); };
  return radix_threshold(scope, key_of, SearchTarget{false, static_cast<std::uint64_t>(k), 0.f, 0, false}, sh).key;
}

// The value an ordered key stands for (ordered_key's inverse, exact).
__device__ __forceinline__ float ordered_value(std::uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Every element of the output row gets `dropped` (no read of the input).
template <typename T>
__device__ __forceinline__ void fill_row(T* y, std::int64_t n, bool aligned, float dropped) {
  const float fill[4] = {dropped, dropped, dropped, dropped};
  for (std::int64_t g = threadIdx.x; g < (n + 3) / 4; g += blockDim.x) store_group4(y, n, g, aligned, fill);
}

// The listing kernels' row scope: it fills the output row with `dropped` as soon as level 0
// has read the input row (after_listing_read), so that the writes drain while the scans and
// levels 1-2 run from shared memory, instead of after them (A/B at 128 x 128256, one CTA per
// SM: mask 0.956x / 0.964x flat / peaked, top-k renorm 0.956x / 0.958x; 512 rows 0.964x-0.977x;
// history/ab-sampling-early-fill-daa92de.txt). write_from_list then writes only the kept
// elements; where the list is dropped, the output pass writes every element anyway. It fills
// only where the output is not the row itself (fills; the core never passes one that is),
// since the head is read again after level 0 and a dropped list's output pass reads the row.
// With GatherMode::kSearch (top-p renormalisation) the search's gather pass lists the kept
// set where it fits (radix_threshold.cuh's ListsKeptSet), and the scope fills once it has.
template <typename T, GatherMode kGather = GatherMode::kHeadBound>
struct FillingRowScope : RowScope<T, kGather> {
  static constexpr bool kListsKeptSet = kGather == GatherMode::kSearch;
  T* y;
  bool out_aligned;
  float dropped;
  bool fills;
  __device__ FillingRowScope(const T* row, std::int64_t length, T* out, bool aligned_out, float value)
      : RowScope<T, kGather>(row, length), y(out), out_aligned(aligned_out), dropped(value),
        fills(static_cast<const void*>(out) != static_cast<const void*>(row)) {}
  __device__ void after_listing_read() const {
    if (fills) fill_row(y, this->n, out_aligned, dropped);
  }
};

// The output pass from the list (Threshold::kept_listed): every element gets `dropped`
// without a read of the row (unless `filled`: FillingRowScope did it), then each warp writes
// its slice's kept keys (key >= min_key) at their positions, value_of(key). The row is not
// read after the search, so out may alias it.
template <typename T, typename ValueFn>
__device__ void write_from_list(T* y, std::int64_t n, bool aligned, float dropped, std::uint32_t min_key,
                                const RowRadixShared& sh, ValueFn value_of, bool filled) {
  if (!filled) fill_row(y, n, aligned, dropped);
  __syncthreads();  // the fill is in place before any kept element is written over it
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  const std::uint32_t count = sh.gathered[threadIdx.x >> 5];
  for (std::uint32_t i = threadIdx.x & 31; i < count; i += 32) {
    const std::uint32_t key = space.keys[space.slice_begin + i];
    if (key != 0u && key >= min_key) store_float(y + space.positions[space.slice_begin + i], value_of(key));
  }
}

// Output b of a sampling call: the drawn token, or (drawn < 0) token 0 marked invalid when
// nothing took part.
__device__ __forceinline__ void write_sample(const SampleParams& p, std::int64_t b, std::int64_t drawn) {
  const std::int64_t token = drawn >= 0 ? drawn : 0;
  if (p.samples_int64) {
    static_cast<std::int64_t*>(p.samples)[b] = token;
  } else {
    static_cast<std::int32_t*>(p.samples)[b] = static_cast<std::int32_t>(token);
  }
  if (p.valid) p.valid[b] = drawn >= 0;
}

// Renormalised group: kept probabilities times `factor`, everything else 0.
__device__ __forceinline__ void renorm_group(float (&v)[4], const KeptSet& kept, float factor) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t k = prob_key(v[j]);
    v[j] = (kept.any && k != 0u && k >= kept.min_key) ? v[j] * factor : 0.f;
  }
}

// Masked group: logits below the top-k key (and NaN) become -inf.
__device__ __forceinline__ void mask_group(float (&v)[4], std::uint32_t min_key) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (v[j] != v[j] || ordered_key(v[j]) < min_key) v[j] = -INFINITY;  // NaN is never kept
  }
}

// 1 / (the kept set's probability mass): a mass q stands for q * 2^-(150 + base).
__device__ __forceinline__ float renorm_factor(const KeptSet& kept) {
  return kept.mass > 0 ? ldexpf(1.f / static_cast<float>(kept.mass), 150 + kept.base) : 0.f;
}

}  // namespace detail

// The row kernels come in two sizes: kRowThreads threads, one CTA per SM, and half as many,
// two CTAs per SM (the same 64-register cap), for batches of several waves, where one row's
// serial tail (scans, the draw's rescan) then overlaps another's streaming (row_threads in
// sample_launch.cu chooses).
constexpr int kRowCtasPerSm(int threads) { return kRowThreads / threads; }

// kFamily: the filter modes this instance serves (FilterFamily; the launcher picks by mode).
// The top-k and top-p samplers gather their crossing bin and the draw's segments (gather.cuh);
// kLists (top-k and two-search samplers): the top-k search's level-0 list instead
// (sampler_gather), an instance of its own, since the listing code slowed rows that stay in L1.
template <FilterFamily kFamily, int kThreads = kRowThreads, bool kLists = false>
__global__ void __launch_bounds__(kThreads, kRowCtasPerSm(kThreads)) sample_kernel(const __grid_constant__ SampleParams p) {
  static_assert(!kLists || kFamily == FilterFamily::kTopK || kFamily == FilterFamily::kTwoSearches,
                "only samplers with a top-k search list");
  static_assert(kFamily != FilterFamily::kTopPRejectionBinned || kThreads >= RejectionBins::kChunks,
                "RejectionBins::build_tables gives each thread one chunk");
  __shared__ RowRadixShared sh;
  if (threadIdx.x == 0) sh.gather_sizes = p.gather;  // read after the first search level's barriers
  pdl_wait_for_prior_grid();
  const std::int64_t b = blockIdx.x;
  const std::int64_t row = detail::source_row(p.indices, p.indices_int64, b);
  const bool row_ok = row >= 0 && row < p.rows;
  const float* x = p.input + (row_ok ? row : 0) * p.row_stride;
  const std::int64_t n = p.vocab;
  const RowRandom rng = p.random.for_row(b, 0);
  std::int64_t token = -1;
  if (p.input_is_logits) {
    ScoredIndex best{0.f, -1};
    if (row_ok) {
      const bool aligned = group_aligned(x);
      // Gumbel-max as a race: minimise log(E_i) - x_i. NaN and -inf never win.
      for (std::int64_t g = threadIdx.x; g < (n + 3) / 4; g += blockDim.x) {
        float v[4];
        load_group4(x, n, g, aligned, -INFINITY, v);
        const Philox4 w = rng.words(static_cast<std::uint64_t>(g));
        const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (!(v[j] > -INFINITY)) continue;  // -inf, NaN, tail
          const float e = RowRandom::exponential(words[j]);
          const ScoredIndex c{logf(e) - v[j], 4 * g + j};
          if (better_min(c, best)) best = c;
        }
      }
    }
    token = block_argmin(best).index;
  } else if (row_ok) {
    // The two-search sampler's passes all ascend: alternating, it ran 1.01-1.19x slower at
    // 128-512 rows (joint), also where the rows fit in L2 (128 x 32000), while the other row
    // kernels gained up to 15% where they do not; why was not found (dev/NOTES.md item 48).
    constexpr bool kAlternates = kFamily != FilterFamily::kTwoSearches;
    const RowScope<float, sampler_gather(kFamily, kLists), kAlternates> scope(x, n);
    token = detail::family_draw<kFamily>(scope, n, p.filter, row, rng, sh);
  }
  pdl_launch_dependents();
  if (threadIdx.x == 0) detail::write_sample(p, b, token);
}

// Renormalisation (kMask = false): out = kept ? p / mass(kept) : 0, for top-k or top-p.
// Top-k masking (kMask = true): out = logits where the logit is among the row's top k (ties
// kept), -inf elsewhere and for NaN. kFamily (renormalisation): kTopK or kTopP; top-p
// gathers its crossing bin (gather.cuh). kLists (the mask and top-k; the launcher's
// launch_top_k_rows says where): level 0 lists the search's candidates (head_bound_list.cuh),
// and the output pass writes the kept set from that list when it holds it, without reading
// the row again; an instance of its own, since the listing code's registers slowed the kernels
// where no list runs.
template <typename T, bool kMask, int kThreads = kRowThreads, FilterFamily kFamily = FilterFamily::kOneSearch,
          bool kLists = false>
__global__ void __launch_bounds__(kThreads, kRowCtasPerSm(kThreads))
    row_filter_kernel(const __grid_constant__ RowFilterParams<T> p) {
  static_assert(!kLists || kMask || kFamily == FilterFamily::kTopK, "only count searches list");
  constexpr GatherMode kGather = kLists ? GatherMode::kHeadBound : renorm_gather(kFamily);
  __shared__ RowRadixShared sh;
  if (threadIdx.x == 0) sh.gather_sizes = p.gather;  // read after the first search level's barriers
  pdl_wait_for_prior_grid();
  const std::int64_t row = blockIdx.x;
  const T* x = p.input + row * p.in_row_stride;
  T* y = p.out + row * p.out_row_stride;
  const std::int64_t n = p.vocab;
  // The output pass is one more pass of the scope: against the search's last pass
  // (RowScope::next_pass_descending), four loads per thread in flight.
  const bool out_aligned = group_aligned(y);
  auto write_pass = [&](const auto& scope, auto&& transform) {
    scope.for_each_group(0.f, [&](std::int64_t g, const float (&in)[4]) {
      float v[4] = {in[0], in[1], in[2], in[3]};
      transform(v);
      store_group4(y, n, g, out_aligned, v);
    });
  };
  // kLists: where the list holds the kept set, the output pass writes from it instead.
  if constexpr (kMask && kLists) {
    const detail::FillingRowScope<T> scope(x, n, y, out_aligned, -INFINITY);
    const Threshold t = detail::top_k_logit_threshold(scope, n, p.filter, row, sh);
    if (t.kept_listed) {
      detail::write_from_list(y, n, out_aligned, -INFINITY, t.key, sh, detail::ordered_value, scope.fills);
    } else {
      write_pass(scope, [&](float (&v)[4]) { detail::mask_group(v, t.key); });
    }
  } else if constexpr (kMask) {
    const RowScope<T, kGather> scope(x, n);
    const std::uint32_t min_key = detail::top_k_logit_key(scope, n, p.filter, row, sh);
    write_pass(scope, [&](float (&v)[4]) { detail::mask_group(v, min_key); });
  } else if constexpr (kGather == GatherMode::kOff) {
    // (A FillingRowScope here, which never lists, changed these kernels' code: kept apart.)
    const RowScope<T, kGather> scope(x, n);
    const detail::KeptSet kept = detail::prob_filter<kFamily>(scope, n, p.filter, row, true, sh);
    const float factor = detail::renorm_factor(kept);
    write_pass(scope, [&](float (&v)[4]) { detail::renorm_group(v, kept, factor); });
  } else {
    // Renormalisation: where the search's list holds the kept set (kLists: level 0's list of a
    // top-k search; GatherMode::kSearch: a top-p search's gather list, ListsKeptSet), the
    // output is written from it, otherwise by the pass.
    const detail::FillingRowScope<T, kGather> scope(x, n, y, out_aligned, 0.f);
    const detail::KeptSet kept = detail::prob_filter<kFamily>(scope, n, p.filter, row, true, sh);
    const float factor = detail::renorm_factor(kept);
    if (kept.listed && kept.any) {
      detail::write_from_list(
          y, n, out_aligned, 0.f, kept.min_key, sh, [&](std::uint32_t key) { return __uint_as_float(key) * factor; },
          scope.fills);
    } else {
      write_pass(scope, [&](float (&v)[4]) { detail::renorm_group(v, kept, factor); });
    }
  }
  pdl_launch_dependents();
}

}  // namespace aotinfer::sampling
