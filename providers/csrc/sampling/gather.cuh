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
// segment masses (the sampler of one search; its draw then needs no pass of its own).
enum class GatherMode { kOff, kSearch, kSearchAndDraw };

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
struct GatherSpace {
  std::uint64_t* segments;  // nullptr: not wanted
  std::uint32_t* keys;
  std::uint32_t* positions;
  std::uint32_t capacity;

  __device__ static GatherSpace of(const GatherSizes& sizes) {
    extern __shared__ std::uint64_t gather_smem[];
    std::uint32_t* keys = reinterpret_cast<std::uint32_t*>(gather_smem + sizes.segments);
    return GatherSpace{sizes.segments ? gather_smem : nullptr, keys, keys + sizes.capacity, sizes.capacity};
  }

  __device__ std::uint32_t slice() const { return capacity / (blockDim.x >> 5); }
  __device__ std::uint32_t slice_begin() const { return (threadIdx.x >> 5) * slice(); }
};

// Appends (key, position) for every lane whose `match` is set to this warp's slice; `count` is
// the warp's running count, the same in every lane (it may pass the slice: the caller then
// drops the list). Every lane of the warp must call it.
__device__ __forceinline__ void gather_append(const GatherSpace& space, std::uint32_t& count, bool match,
                                              std::uint32_t key, std::uint32_t position) {
  const unsigned lanes = __ballot_sync(kFullMask, match);
  if (lanes == 0u) return;
  const std::uint32_t at = count + static_cast<std::uint32_t>(__popc(lanes & ((1u << (threadIdx.x & 31)) - 1u)));
  if (match && at < space.slice()) {
    space.keys[space.slice_begin() + at] = key;
    space.positions[space.slice_begin() + at] = position;
  }
  count += static_cast<std::uint32_t>(__popc(lanes));
}

}  // namespace aotinfer::sampling
