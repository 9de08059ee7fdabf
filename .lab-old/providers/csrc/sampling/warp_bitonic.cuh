// Bitonic sorting networks over 64 keys held by one warp, two a lane (element i = lane + 32 r
// in register r): rank 0's top-k threshold from its list (cluster_local_top_k.cuh's
// list_top_k). dev/model_list_sorting.py models them lane by lane.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"

namespace aotinfer::sampling {

// One compare-exchange step of a bitonic network over the 64 keys of a warp, element
// i = lane + 32 r in a[r]: sequences of length `len` sorted descending where i & len is 0
// (every one when len is 64), ascending elsewhere; partners i and i ^ j.
__device__ __forceinline__ void warp_bitonic_step(std::uint32_t (&a)[2], int len, int j) {
  const int lane = threadIdx.x & 31;
  if (j == 32) {  // partners in one lane
    const bool down = (lane & len) == 0;  // (len >= 64 here: every sequence descends)
    const std::uint32_t hi = max(a[0], a[1]), lo = min(a[0], a[1]);
    a[0] = down ? hi : lo;
    a[1] = down ? lo : hi;
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = lane + 32 * r;
    const std::uint32_t other = __shfl_xor_sync(kFullMask, a[r], j);
    const bool down = (i & len) == 0, lower = (i & j) == 0;
    a[r] = down == lower ? max(a[r], other) : min(a[r], other);
  }
}

// Sorts a bitonic sequence of 64 (two a lane) descending.
__device__ __forceinline__ void warp_bitonic_merge(std::uint32_t (&a)[2]) {
#pragma unroll
  for (int j = 32; j > 0; j >>= 1) warp_bitonic_step(a, 64, j);
}

// The larger 64 of two descending lists of 64 (a in registers, b read by element index),
// descending, in a.
template <typename ReadB>
__device__ __forceinline__ void warp_keep_larger_64(std::uint32_t (&a)[2], ReadB b) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < 2; ++r) a[r] = max(a[r], b(63 - lane - 32 * r));
  warp_bitonic_merge(a);
}

}  // namespace aotinfer::sampling
