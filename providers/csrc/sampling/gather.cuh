// Gathering a threshold search's crossing bin into shared memory (one-CTA-per-row kernels).
//
// After level 0 of a search (radix_threshold.cuh) the crossing lies in one level-0 bin, whose
// element count that level's histogram holds. When they fit, one more pass over the row
// copies that bin's keys and positions into shared memory, and levels 1 and 2 then read them
// there instead of reading the row twice more. The kept set is unchanged: the later levels see
// exactly the elements that match level 0's digit, as a pass over the row would.
//
// The same pass can also give the inverse-CDF draw (inverse_cdf.cuh) its segment masses for
// every key above the bin, so a sampler reads its row twice in all: level 0, then this pass;
// the draw adds the kept part of the gathered bin afterwards, in shared memory, and gets the
// integer segment masses a separate pass would have summed.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"

namespace aotinfer::sampling {

// What a kernel's searches may gather: nothing, their crossing bin, or the bin and the draw's
// segment masses (the sampler of one search; its draw then needs no pass of its own); or
// (kHeadBound, for count searches: top-k masking and renormalisation) the candidates that
// level 0 lists while it reads the row, with no pass of its own (head_bound_list.cuh); or
// (kKeptSet, for the two-search sampler) the first search's kept set, listed by one pass after
// that search, which the second search and the draw then read instead of the row
// (kept_set_list.cuh).
enum class GatherMode { kOff, kSearch, kSearchAndDraw, kHeadBound, kKeptSet };

// The dynamic shared memory of a gathering row kernel, sized by the launcher
// (sample_launch.cu): `segments` draw segment masses (0: none), then `capacity` gathered keys
// and as many positions (0: no gathering). The kernel copies it into its RadixShared, and the
// searches read it there when they need it. (What kept the gather code's registers from
// slowing the other passes was compiling it only into the kernels that gather: FilterFamily
// in filter_sample.cuh.)
struct GatherSizes {
  std::uint32_t segments;
  std::uint32_t capacity;
};

// Views of that memory. Each warp appends to its own slice of capacity / warps entries, with
// no atomics: one counter for the whole CTA made every append a same-address atomic (a flat
// row of 128256 gathers ~8500 elements), which cost more than the passes the gather saved.
// (The slice is divided out once here, not per append: in the gather pass of a flat top-p
// row that division was ~7% of the kernel's instructions.)
struct GatherSpace {
  std::uint64_t* segments;  // nullptr: not wanted
  std::uint32_t* keys;
  std::uint32_t* positions;
  std::uint32_t slice;        // entries per warp: capacity / warps
  std::uint32_t slice_begin;  // of this warp's slice

  __device__ static GatherSpace of(const GatherSizes& sizes) {
    extern __shared__ std::uint64_t gather_smem[];
    std::uint32_t* keys = reinterpret_cast<std::uint32_t*>(gather_smem + sizes.segments);
    const std::uint32_t slice = sizes.capacity / (blockDim.x >> 5);
    return GatherSpace{sizes.segments ? gather_smem : nullptr, keys, keys + sizes.capacity, slice,
                       (threadIdx.x >> 5) * slice};
  }
};

// Zeroes the draw's segment masses (GatherSpace::segments), for a draw whose every kept key is
// in the list (draw_after_gather adds them all); ends with a barrier.
__device__ __forceinline__ void zero_segments(const GatherSizes& sizes) {
  const GatherSpace space = GatherSpace::of(sizes);
  for (std::uint32_t i = threadIdx.x; i < sizes.segments; i += blockDim.x) space.segments[i] = 0;
  __syncthreads();
}

// Appends the keys of one group of four elements (positions first .. first + 3) whose bit is
// set in `match` (bit j: element j) to this warp's slice; `count` is the warp's running count,
// the same in every lane (it may pass the slice: the caller then drops the list). Every lane
// of the warp must call it. One set of ballots per group, not per element: a lane's offset
// is the sum of the match counts (0-4, three bits) of the lanes below it, read off three
// ballots of those bits. (The list's order differs from the row's; its readers only sum.)
__device__ __forceinline__ void gather_append_group(const GatherSpace& space, std::uint32_t& count, unsigned match,
                                                    const std::uint32_t (&keys)[4], std::uint32_t first) {
  const unsigned n = static_cast<unsigned>(__popc(match));
  const unsigned b0 = __ballot_sync(kFullMask, n & 1u), b1 = __ballot_sync(kFullMask, n & 2u),
                 b2 = __ballot_sync(kFullMask, n & 4u);
  if ((b0 | b1 | b2) == 0u) return;
  const unsigned below = (1u << (threadIdx.x & 31)) - 1u;
  std::uint32_t at = count + static_cast<std::uint32_t>(__popc(b0 & below) + 2 * __popc(b1 & below) +
                                                        4 * __popc(b2 & below));
  count += static_cast<std::uint32_t>(__popc(b0) + 2 * __popc(b1) + 4 * __popc(b2));
  const std::uint32_t slice = space.slice, begin = space.slice_begin;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if ((match >> j) & 1u) {
      if (at < slice) {
        space.keys[begin + at] = keys[j];
        space.positions[begin + at] = first + static_cast<std::uint32_t>(j);
      }
      ++at;
    }
  }
}

}  // namespace aotinfer::sampling
