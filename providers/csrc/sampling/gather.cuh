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

// Where the gathered bin goes: the kernel's dynamic shared memory (the launcher sizes it,
// sample_launch.cu). capacity 0 turns gathering off; segments (nullptr: not wanted) holds the
// draw's segment masses when the search is the last before a draw.
struct GatherSpace {
  std::uint64_t* segments;
  std::uint32_t* keys;
  std::uint32_t* positions;
  std::uint32_t capacity;
};

// Appends (key, position) to the gathered list for every lane whose `match` is set; every lane
// of the warp must call it (one ballot, and one atomic per warp with a match).
__device__ __forceinline__ void gather_append(const GatherSpace& space, std::uint32_t* count, bool match,
                                              std::uint32_t key, std::uint32_t position) {
  const unsigned lanes = __ballot_sync(kFullMask, match);
  if (lanes == 0u) return;
  const int lane = threadIdx.x & 31, leader = __ffs(lanes) - 1;
  std::uint32_t start = 0;
  if (lane == leader) start = atomicAdd(count, static_cast<std::uint32_t>(__popc(lanes)));
  start = __shfl_sync(kFullMask, start, leader);
  const std::uint32_t at = start + static_cast<std::uint32_t>(__popc(lanes & ((1u << lane) - 1u)));
  if (match && at < space.capacity) {  // the level-0 count bounds `at`; the test is a guard
    space.keys[at] = key;
    space.positions[at] = position;
  }
}

}  // namespace aotinfer::sampling
