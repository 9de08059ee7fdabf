// Lab AOTINFER_LAB_TOP_P_BAND (session 66): top-p renormalisation of a flat row in two passes
// over it instead of three.
//
// Why: the one-CTA-per-row top-p renorm kernel reads a flat row three times (radix level 0,
// the crossing bin's gather pass, the output pass) and writes it once. At 128 x 128256 it runs
// at ~43% of copy (issue #3's goal: 50%), and about half its time is instruction issue: level
// 0 ~17 and the gather pass ~31 instructions an element a lane (dev/NOTES.md items 94-95).
//
// How: a sample of the row (kBandSampleGroups groups in runs spread over it: 1/16 of a 128256 row)
// estimates where the crossing lies, and picks a band of keys [lo, hi) that holds it with
// a margin of the row's mass to spare on either side (band_margin). One pass over the row then sums the
// fixed-point masses of every participant and of those >= hi in registers (no histogram
// atomics) and lists the band's keys into shared memory (keys alone: the list takes the
// positions' space as well). Where the crossing is in the band (the mass >= hi falls short of
// the goal, and with the band's reaches it), the radix search runs over the list alone
// (radix_threshold with from_list), and the output pass follows. Where it is not (the sample
// misled, a warp's slice overflowed, or some key's mass would be floored in the pass's unit),
// the search runs as before and the band pass was wasted. The sample decides whether to try:
// only rows whose kept set looks too large for the kept-set list (filter_sample.cuh's
// ListsKeptSet path, which serves peaked rows) and whose band looks small enough to list.
//
// Exactness: the pass's unit puts a key of exponent field f at mantissa << (f - ref_field),
// ref_field from the sample's largest key with kBandHeadroom binades to spare. It is used only
// where every participant's field lies in [ref_field, ref_field + S - 24] (S: mass_bits), so
// that every mass is exact both in it and in the searches' unit (the row's largest key's,
// search_mass_base), which is a left shift of it: the total, the goal and the kept mass are the
// integers the radix search would find, the kept set is the same, and so is every output bit.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "fixed_point.cuh"
#include "gather.cuh"
#include "radix_threshold.cuh"
#include "row_scope.cuh"

namespace aotinfer::sampling {

#ifdef AOTINFER_LAB_TOP_P_BAND
constexpr bool kLabTopPBand = true;
#else
constexpr bool kLabTopPBand = false;
#endif

constexpr int kBandSampleGroups = 2048;                   // groups of four elements sampled
// in kBandChunks runs of contiguous groups spread over the row. (Groups spread one by one, ~250
// bytes apart at 128256, cost ~12 us a row: each took a DRAM burst of its own.)
constexpr int kBandChunks = 16, kBandChunkGroups = kBandSampleGroups / kBandChunks;
constexpr int kBandBins = RadixShared::kBins;             // the sample's histogram
constexpr int kBandBinShift = 18;                         // 1/64 binade a bin
// The band's margins, of the row's mass either side of the estimate: the widest whose band
// the sample says fits is taken. (dev/model_top_p_band.py, the sample's steps on the CPU: 30
// rows each of softmax(s x randn) at s = 0.5, 1, 2 and top-p 0.5 and 0.9, vocab 128256: every
// band tried held its crossing; bands of 6.5-11K keys.)
constexpr int kBandMargins = 3;
__device__ __forceinline__ float band_margin(int i) { return i == 0 ? 0.06f : (i == 1 ? 0.03f : 0.015f); }
constexpr int kBandTargets = 1 + 2 * kBandMargins;
constexpr int kBandHeadroom = 3;                          // binades above the sample's largest
constexpr std::int64_t kBandMinGroups = 8 * kBandSampleGroups;  // rows of 65536 and more

// What the sample chose: try the band (tried), its keys lo <= key < hi, and the pass's unit.
struct TopPBand {
  bool tried;
  std::uint32_t lo, hi;
  int ref_field;
};

// The kept set the band found (ok), as filter_sample.cuh's KeptSet holds it.
struct BandKept {
  bool ok;
  std::uint32_t min_key, max_key;
  std::uint64_t mass;
  int base;
};

// The list search's scope: every level reads the band's list (SearchTarget::from_list), never
// the row, so its row loops compile to nothing.
struct BandListScope : RowScope<float, GatherMode::kKeptSet> {
  static constexpr bool kPeelsLevel0 = false;
  __device__ explicit BandListScope(std::int64_t n) : RowScope<float, GatherMode::kKeptSet>(nullptr, n) {}
  template <typename F>
  __device__ void for_each_group(float, F&&) const {}
};

// The sample's estimate (every thread of the CTA calls it; the result is the same in all).
// capacity: the kernel's gather list (keys and positions), read here after a barrier.
template <int kThreads, typename Scope, typename Sh>
__device__ TopPBand sample_band(const Scope& scope, std::int64_t n, float p, Sh& sh) {
  static_assert(kBandSampleGroups % kThreads == 0 && kBandBins % kThreads == 0, "whole shares a thread");
  constexpr int kPer = kBandSampleGroups / kThreads, kBinsPer = kBandBins / kThreads;
  // Per target (kBandTargets: p, then p - m and p + m for each margin m): the first bin whose
  // running mass reaches it (p + m, p: inclusive counts) or passes it (p - m: the count before).
  __shared__ int crossing_bin[kBandTargets];
  __shared__ std::uint64_t crossing_count[kBandTargets];
  const std::int64_t groups = scope.local_groups();
  std::uint32_t keys[4 * kPer];
  std::uint32_t top = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    float v[4];
    const std::int64_t s = threadIdx.x + static_cast<std::int64_t>(i) * kThreads;
    scope.load(s / kBandChunkGroups * groups / kBandChunks + s % kBandChunkGroups, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      keys[4 * i + j] = prob_key(v[j]);
      top = max(top, keys[4 * i + j]);
    }
  }
  top = scope.reduce(top, MaxOp{}, 0u);  // (its barriers also publish sh.gather_sizes)
  TopPBand band{false, 0u, 0u, 0};
  const int top_field = static_cast<int>(top >> 23);
  band.ref_field = top_field + kBandHeadroom - (mass_bits(n) - 24);
  // (Field 17 and up: the scale below is a normal float; tiny rows keep the search.)
  if (top_field < 17 || band.ref_field < 1 || !(p + band_margin(kBandMargins - 1) < 1.f)) return band;
  for (int i = threadIdx.x; i < kBandBins; i += kThreads) {
    sh.count[i] = 0;
    sh.mass_lo[i] = 0;
  }
  if (threadIdx.x < kBandTargets) crossing_bin[threadIdx.x] = -1;
  __syncthreads();
  // Bin j: keys whose top bits are (top >> kBandBinShift) - j (descending keys); keys deeper
  // than the bins (32 binades below the largest) are left out. Masses are integers, at most
  // 2^18 each (2^(144 - top_field) times the value), so a bin of the whole sample stays below
  // 2^31: native shared atomics. (Float atomics are compare-and-swap loops: with every deeper
  // key in one last bin, a sharp row's sample spent ~80 us there, history/ab-sampling-top-p-
  // band-e2606ad-h100.txt.)
  const std::uint32_t top_bits = top >> kBandBinShift;
  const float scale = __uint_as_float(static_cast<std::uint32_t>(271 - top_field) << 23);
#pragma unroll
  for (int e = 0; e < 4 * kPer; ++e) {
    const std::uint32_t bin = top_bits - (keys[e] >> kBandBinShift);
    if (keys[e] == 0u || bin >= static_cast<std::uint32_t>(kBandBins)) continue;
    atomicAdd(&sh.count[bin], 1u);
    atomicAdd(&sh.mass_lo[bin], __float2uint_rz(__uint_as_float(keys[e]) * scale));
  }
  __syncthreads();
  std::uint64_t c[kBinsPer], m[kBinsPer], c_sum = 0, m_sum = 0;
  const int first = static_cast<int>(threadIdx.x) * kBinsPer;
#pragma unroll
  for (int i = 0; i < kBinsPer; ++i) {
    c[i] = sh.count[first + i];
    m[i] = sh.mass_lo[first + i];
    c_sum += c[i];
    m_sum += m[i];
  }
  std::uint64_t run_c, run_m, all_c, all_m;
  block_exclusive_scan_pair(c_sum, m_sum, &run_c, &run_m, &all_c, &all_m);
  const double all = static_cast<double>(all_m);
  std::uint64_t target[kBandTargets];
  target[0] = static_cast<std::uint64_t>(static_cast<double>(p) * all);
#pragma unroll
  for (int t = 0; t < kBandMargins; ++t) {
    target[1 + 2 * t] = static_cast<std::uint64_t>(fmax(static_cast<double>(p - band_margin(t)), 0.0) * all);
    target[2 + 2 * t] = static_cast<std::uint64_t>(fmin(static_cast<double>(p + band_margin(t)), 1.0) * all);
  }
#pragma unroll
  for (int i = 0; i < kBinsPer; ++i) {
    const std::uint64_t before_c = run_c, before_m = run_m;
    run_c += c[i];
    run_m += m[i];
#pragma unroll
    for (int t = 0; t < kBandTargets; ++t) {
      const bool passes = t % 2 == 1 ? before_m <= target[t] && run_m > target[t]  // p - m: the band's top
                                     : before_m < target[t] && run_m >= target[t];
      if (passes) {
        crossing_bin[t] = first + i;
        crossing_count[t] = t % 2 == 1 ? before_c : run_c;
      }
    }
  }
  __syncthreads();
  // Estimated counts in the row: the sample's, times elements a sampled element.
  const double per = static_cast<double>(n) / (4.0 * kBandSampleGroups);
  const double capacity = static_cast<double>(sh.gather_sizes.capacity);  // keys: twice that
  if (crossing_bin[0] < 0 || !(static_cast<double>(crossing_count[0]) * per > capacity)) return band;
  for (int t = 0; t < kBandMargins && !band.tried; ++t) {
    const int hi_bin = crossing_bin[1 + 2 * t], lo_bin = crossing_bin[2 + 2 * t];
    if (!(p + band_margin(t) < 1.f) || hi_bin < 0 || lo_bin < 0 || lo_bin >= kBandBins - 1 ||
        static_cast<int>(top_bits) - lo_bin < 1) {
      continue;
    }
    const double listed = static_cast<double>(crossing_count[2 + 2 * t] - crossing_count[1 + 2 * t]) * per;
    if (listed > 0.75 * capacity) continue;
    band.lo = (top_bits - static_cast<std::uint32_t>(lo_bin)) << kBandBinShift;
    band.hi = (top_bits - static_cast<std::uint32_t>(hi_bin) + 1u) << kBandBinShift;
    band.tried = true;
  }
  return band;
}

// The band pass and the search over its list (every thread calls it; the same result in all).
template <typename Scope, typename Sh>
__device__ BandKept band_search(const Scope& scope, std::int64_t n, float p, const TopPBand& band, Sh& sh) {
  __syncthreads();  // every thread has read the capacity (sample_band) before it changes
  if (threadIdx.x == 0) {
    sh.gather_sizes.capacity *= 2;  // keys alone, in the positions' space too
    sh.gather_overflow = 0;
  }
  __syncthreads();
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  const std::uint32_t offset = static_cast<std::uint32_t>(150 - band.ref_field) << 23;
  const std::uint32_t lo = band.lo, hi = band.hi, width = band.hi - band.lo;
  // Each thread lists into its own kBandSlots-entry run of its warp's slice (no ballots: in
  // the first form, gather_append_group's per-group ballots and offsets were ~18% of the
  // kernel's instructions, history/ncu-top-p-band-629671f-h100.txt); the unused entries are
  // then zeroed, and the searches read the warp's 32 runs as its list (key 0 takes no part).
  const std::uint32_t runs = space.slice / 32u;
  std::uint32_t* const run = space.keys + space.slice_begin + (threadIdx.x & 31) * runs;
  std::uint64_t total = 0, above = 0;
  std::uint32_t largest = 0, smallest_less_1 = ~0u, count = 0;
  scope.for_each_group(NAN, [&](std::int64_t, const float (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::uint32_t k = prob_key(v[j]);  // NaN (past the end) gives key 0
      // mantissa << (field - ref_field): exact for the fields the checks below allow.
      const std::uint64_t q = __float2ull_rz(__uint_as_float(k != 0u ? k + offset : 0u));
      total += q;
      if (k >= hi) above += q;
      largest = max(largest, k);
      smallest_less_1 = min(smallest_less_1, k - 1u);  // key 0 gives ~0
      if (k - lo < width) {
        if (count < runs) run[count] = k;
        ++count;
      }
    }
  });
  for (std::uint32_t i = count; i < runs; ++i) run[i] = 0u;
  if (count > runs) sh.gather_overflow = 1;
  if ((threadIdx.x & 31) == 0) sh.gathered[threadIdx.x >> 5] = 32u * runs;
  total = scope.reduce(total, SumOp{}, std::uint64_t{0});  // (its barriers publish the counts)
  above = scope.reduce(above, SumOp{}, std::uint64_t{0});
  largest = scope.reduce(largest, MaxOp{}, 0u);
  const std::uint32_t smallest = ~scope.reduce(~smallest_less_1, MaxOp{}, 0u) + 1u;
  const int s = mass_bits(n), max_field = static_cast<int>(largest >> 23);
  BandKept r{false, 0u, largest, 0, search_mass_base(static_cast<std::uint32_t>(max_field), n)};
  bool ok = sh.gather_overflow == 0 && largest != 0u && max_field <= band.ref_field + s - 24 &&
            static_cast<int>(smallest >> 23) >= band.ref_field;
  // The searches' unit is the pass's << up (up >= 0 where ok).
  const int up = band.ref_field + s - 24 - max_field;
  std::uint64_t goal = 0, above_t = 0;
  std::uint32_t list_top = 0;
  std::uint64_t listed = 0;  // the band's mass, in the pass's unit
  if (ok) {
    above_t = above << up;
    goal = mass_goal(fmaxf(p, 0.f), total << up);
    const std::uint32_t mine = sh.gathered[threadIdx.x >> 5];
    for (std::uint32_t i = threadIdx.x & 31; i < mine; i += 32) {
      const std::uint32_t k = space.keys[space.slice_begin + i];
      list_top = max(list_top, k);
      listed += __float2ull_rz(__uint_as_float(k != 0u ? k + offset : 0u));
    }
    list_top = scope.reduce(list_top, MaxOp{}, 0u);
    listed = scope.reduce(listed, SumOp{}, std::uint64_t{0});
    ok = above_t < goal && goal - above_t <= (listed << up);
  }
  if (ok) {
    // The list search's unit is its own largest key's (search_mass_base): the searches' << d.
    const int d = max_field - static_cast<int>(list_top >> 23);
    SearchTarget target{true, 0, 1.f, (goal - above_t) << d, true};  // goal: mass_goal(1, base) = base
    target.exact_key = true;  // a bin's lower bound may lie below lo, where unlisted keys are
    target.row_length = n;
    target.from_list = true;
    const BandListScope list(n);
    const Threshold t = radix_threshold<false, true, true>(list, [](float v) { return prob_key(v); }, target, sh);
    if (t.key != 0u) {
      r.ok = true;
      r.min_key = t.key;
      r.mass = above_t + (t.mass_ge >> d);
    }
  }
  if (threadIdx.x == 0) sh.gather_sizes.capacity /= 2;  // a search after a miss reads it after its barriers
  __syncthreads();
  return r;
}

}  // namespace aotinfer::sampling
