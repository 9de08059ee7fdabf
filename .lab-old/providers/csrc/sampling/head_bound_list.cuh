// Listing a count search's candidates during its first level (one-CTA-per-row kernels).
//
// Why: top-k masking and top-k renormalisation read a row three times: level 0, level 1 (the
// next key bits of level 0's crossing bin) and the output pass. At 128 x 128256 the two
// levels drew ~37% of the mask's stall samples (history/ncu-renorm-stalls-c870f69.txt). The
// gather pass (gather.cuh) does not help there: it reads the row again, as level 1 does.
//
// How (GatherMode::kHeadBound): level 0 reads the row's head first, its first head_units warp
// units (128 elements each), and finds the head's own crossing bin b_h for the same k. The row
// holds at least as many keys at or above any bin as its head does, so the row's crossing bin
// b* is never below b_h. While level 0 reads the rest of the row it lists every key whose bin
// is at or above b_h; once level 0's scan knows b*, the head is read again for its keys at or
// above b*. The list then holds every element that levels 1 and 2 count (they test each key
// against the prefix found so far, so the list's other keys do not count), and they read it
// from shared memory instead of the row. It also holds every key of the kept set with its
// position (Threshold::kept_listed), so the output pass need not read the row: it fills the
// row and writes the kept elements from the list (filter_sample.cuh's write_from_list). That
// is exact whatever the row's order: the order only decides how long the list gets, and a
// list that overflows any warp's slice is dropped (level 1 and the output pass then read the
// row, as they do without a list).
//
// The head's length: with the row in random order the list holds about k * V / head keys
// besides b_h's share, so the head is at least 4 k V / C elements for a list of C keys, and
// at least V / 32 (a longer head gives a tighter bound; re-reading it costs head / V of a
// pass). Heads past a quarter of the row (k > C / 16) are not worth a second look at the head:
// the search then runs as it does without a list.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "gather.cuh"
#include "segment_pass.cuh"

namespace aotinfer::sampling {

// The head's length in warp units for a count search of k among n elements with a list of
// `capacity` keys (0: no list; see the file comment).
__device__ __forceinline__ int head_bound_units(std::uint64_t k, std::int64_t n, std::uint32_t capacity) {
  constexpr std::uint32_t kMinCapacity = 256;
  if (capacity < kMinCapacity || k == 0 || k > capacity / 16) return 0;
  const std::int64_t head = max((4 * static_cast<std::int64_t>(k) * n + capacity - 1) / capacity, (n + 31) / 32);
  if (4 * head > n) return 0;
  return static_cast<int>((head + 4 * kSegmentUnitGroups - 1) / (4 * kSegmentUnitGroups));
}

// f(g, v) for the groups of warp units [u0, u1) of the scope's row (unit u: groups 32u ..
// 32u + 31, one per lane), kInFlight units per warp in flight. Every lane of a warp calls f in
// the same rounds (groups past the range or the row: v all NaN), so f may use warp
// collectives. 32-bit indices, as segment_pass.
template <int kInFlight = 4, typename Scope, typename F>
__device__ __forceinline__ void for_each_unit(const Scope& scope, int u0, int u1, F&& f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int whole = static_cast<int>(scope.whole_local_groups()), groups = static_cast<int>(scope.local_groups());
  for (int u = u0 + warp; u < u1; u += kInFlight * warps) {
    float v[kInFlight][4];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int unit = u + i * warps, g = unit * kSegmentUnitGroups + lane;
      if (unit < u1 && g < whole) {
        scope.load_whole(g, v[i]);
      } else if (unit < u1 && g < groups) {
        scope.load(g, v[i]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[i][j] = NAN;
      }
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) f((u + i * warps) * kSegmentUnitGroups + lane, v[i]);
  }
}

// The largest bin b with at least k keys of the histogram (sh.count, complete when called) at
// or above it; 0 when it holds fewer than k. The same in every thread, and the histogram is
// not read after the call returns (so the caller may go on adding to it).
template <typename Sh>
__device__ std::uint32_t count_crossing_bin(Sh& sh, std::uint64_t k) {
  __syncthreads();  // the histogram is complete
  const int per = (Sh::kBins + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int top = Sh::kBins - 1 - per * static_cast<int>(threadIdx.x), bottom = max(top - per + 1, 0);
  std::uint64_t mine = 0;
  for (int b = top; b >= bottom; --b) mine += sh.count[b];
  std::uint64_t total;
  std::uint64_t run = block_exclusive_scan(mine, &total);  // the keys in higher bins
  if (total < k) return 0u;
  if (run < k && run + mine >= k) {  // exactly one thread
    for (int b = top; b >= bottom; --b) {
      run += sh.count[b];
      if (run >= k) {
        sh.digit = static_cast<std::uint32_t>(b);  // until level 0's crossing replaces it
        break;
      }
    }
  }
  __syncthreads();  // (also: no thread adds to the histogram before the finder has read it)
  return sh.digit;
}

// Appends to this warp's slice the keys of group g whose bit is set in `match`, while the
// slice has not overflowed (`count`: the warp's running count, as gather_append_group's).
// Every lane of the warp calls it.
__device__ __forceinline__ void list_group(const GatherSpace& space, std::uint32_t& count, unsigned match,
                                           const std::uint32_t (&keys)[4], int g) {
  if (__any_sync(kFullMask, match != 0u) && count <= space.slice) {
    gather_append_group(space, count, match, keys, static_cast<std::uint32_t>(4 * g));
  }
}

// Reads warp units [u0, u1) of the row: every key goes to add(key) (the level's histogram,
// or nothing), and the keys whose bin (key >> shift) is at or above `bin` join this warp's
// slice of the list (`count`, as list_group's).
template <typename Scope, typename KeyFn, typename AddFn>
__device__ __forceinline__ void list_units_from_bin(const Scope& scope, KeyFn key_of, AddFn add, int u0, int u1,
                                                    int shift, std::uint32_t bin, const GatherSpace& space,
                                                    std::uint32_t& count) {
  for_each_unit(scope, u0, u1, [&](int g, const float (&v)[4]) {
    std::uint32_t key[4];
    unsigned match = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      key[j] = key_of(v[j]);
      add(key[j]);
      if (key[j] != 0u && (key[j] >> shift) >= bin) match |= 1u << j;
    }
    list_group(space, count, match, key, g);
  });
}

// Level 0 of a count search with a list (see the file comment): adds every key of the row to
// the level's histogram through add(key), and lists (warp slices of GatherSpace) the keys
// after the head whose bin (key >> shift) is at or above the head's crossing bin. Returns this
// warp's list length; the head is listed later (list_head_from_crossing_bin), once b* is
// known. A warp whose slice overflowed sets sh.gather_overflow (read after the level's scan).
template <typename Scope, typename KeyFn, typename AddFn, typename Sh>
__device__ std::uint32_t level0_with_list(const Scope& scope, KeyFn key_of, AddFn add, std::uint64_t k,
                                          int head_units, int shift, Sh& sh) {
  const int units = static_cast<int>((scope.local_groups() + kSegmentUnitGroups - 1) / kSegmentUnitGroups);
  scope.next_pass_descending();  // one pass of the alternation (this one ascends)
  for_each_unit(scope, 0, head_units, [&](int, const float (&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) add(key_of(v[j]));  // NaN past the end gives key 0
  });
  const std::uint32_t bound = count_crossing_bin(sh, k);
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  std::uint32_t count = 0;
  list_units_from_bin(scope, key_of, add, head_units, units, shift, bound, space, count);
  if ((threadIdx.x & 31) == 0 && count > space.slice) sh.gather_overflow = 1;
  scope.after_listing_read();
  return count;
}

// After level 0's scan found the crossing bin `digit` and no slice overflowed: the head's keys
// in that bin and every higher one join the list, which then holds every key of the bin and
// above (the kept set, with positions). Returns whether the list holds them all (no slice
// overflowed); sh.gathered[w] is then warp w's list length.
template <typename Scope, typename KeyFn, typename Sh>
__device__ bool list_head_from_crossing_bin(const Scope& scope, KeyFn key_of, int head_units, int shift,
                                            std::uint32_t digit, std::uint32_t count, Sh& sh) {
  const GatherSpace space = GatherSpace::of(sh.gather_sizes);
  list_units_from_bin(scope, key_of, [](std::uint32_t) {}, 0, head_units, shift, digit, space, count);
  if ((threadIdx.x & 31) == 0) {
    sh.gathered[threadIdx.x >> 5] = count;
    if (count > space.slice) sh.gather_overflow = 1;
  }
  __syncthreads();
  return sh.gather_overflow == 0;
}

}  // namespace aotinfer::sampling
