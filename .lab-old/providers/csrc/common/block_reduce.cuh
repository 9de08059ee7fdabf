// Block-wide reductions and scans used by the row kernels. Every thread of the block must
// call them (they contain __syncthreads), and every thread gets the result. Reductions run
// in a fixed order, so the same inputs always give the same bits. Included by more than one
// translation unit of a provider, so every non-template function here is inline.
#pragma once

#include <cstdint>

namespace aotinfer {

constexpr unsigned kFullMask = 0xffffffffu;

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, m));
  return v;
}

// Reduces one value per thread; blockDim.x must be a multiple of 32 and at most 1024.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  __syncthreads();  // partial may still be read by a previous call
  v = warp_reduce(v, op);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T w = lane < (blockDim.x >> 5) ? partial[lane] : identity;
  return warp_reduce(w, op);
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const {
    return a > b ? a : b;
  }
};

// (score, index) pairs: the smallest score wins, ties to the lowest index. An index of -1
// marks "no candidate" and loses to everything.
struct ScoredIndex {
  float score;
  std::int64_t index;
};

__device__ __forceinline__ bool better_min(const ScoredIndex& a, const ScoredIndex& b) {
  if (a.index < 0) return false;
  if (b.index < 0) return true;
  return a.score < b.score || (a.score == b.score && a.index < b.index);
}

__device__ __forceinline__ ScoredIndex shfl_xor(const ScoredIndex& v, int m) {
  return ScoredIndex{__shfl_xor_sync(kFullMask, v.score, m),
                     static_cast<std::int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(v.index), m))};
}

inline __device__ ScoredIndex block_argmin(ScoredIndex v) {
  __shared__ float scores[32];
  __shared__ long long indices[32];
  __syncthreads();
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    ScoredIndex o = shfl_xor(v, m);
    if (better_min(o, v)) v = o;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    scores[warp] = v.score;
    indices[warp] = v.index;
  }
  __syncthreads();
  ScoredIndex w{0.f, -1};
  if (lane < (blockDim.x >> 5)) w = ScoredIndex{scores[lane], indices[lane]};
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    ScoredIndex o = shfl_xor(w, m);
    if (better_min(o, w)) w = o;
  }
  return w;
}

// Inclusive prefix sum over the lanes of a full warp, in lane order.
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const T up = __shfl_up_sync(kFullMask, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Where a target below the warp's total falls among the lanes' values `own` (inclusive: their
// warp_inclusive_scan): the first lane whose running sum exceeds it, and how far into that
// lane's own value it lies.
struct WarpCrossing {
  int lane;
  std::uint64_t rest;
};
__device__ __forceinline__ WarpCrossing warp_crossing(std::uint64_t own, std::uint64_t inclusive,
                                                      std::uint64_t target) {
  const int lane = __ffs(__ballot_sync(kFullMask, inclusive > target)) - 1;
  return WarpCrossing{lane, target - __shfl_sync(kFullMask, inclusive - own, lane)};
}

// Exclusive prefix sum of one uint64 per thread in thread order; *total gets the block sum.
inline __device__ std::uint64_t block_exclusive_scan(std::uint64_t v, std::uint64_t* total) {
  __shared__ std::uint64_t warp_sums[32];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::uint64_t inclusive = warp_inclusive_scan(v);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    // inclusive scan of warp sums
    warp_sums[lane] = warp_inclusive_scan(lane < (blockDim.x >> 5) ? warp_sums[lane] : std::uint64_t{0});
  }
  __syncthreads();
  const std::uint64_t before_warp = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[(blockDim.x >> 5) - 1];
  return before_warp + inclusive - v;
}

// Inclusive prefix sums of a and b across the warp, both values' shuffles in flight together.
inline __device__ void warp_inclusive_scan_pair(std::uint64_t& a, std::uint64_t& b, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const std::uint64_t ua = __shfl_up_sync(kFullMask, a, d), ub = __shfl_up_sync(kFullMask, b, d);
    if (lane >= d) {
      a += ua;
      b += ub;
    }
  }
}

// Two exclusive prefix sums at once (a radix level's counts and masses): the same results
// as two calls of block_exclusive_scan, bit for bit (integer sums in the same order), with
// three barriers instead of six and both values' shuffles in flight together. In the radix
// levels: 1-3% off top-p, joint, the renormalisations and the top-k mask in the cluster and
// the one-CTA-per-row kernels alike (dev/NOTES.md item 57).
inline __device__ void block_exclusive_scan_pair(std::uint64_t a, std::uint64_t b, std::uint64_t* before_a,
                                                 std::uint64_t* before_b, std::uint64_t* total_a,
                                                 std::uint64_t* total_b) {
  __shared__ std::uint64_t warp_a[32], warp_b[32];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  std::uint64_t ia = a, ib = b;
  warp_inclusive_scan_pair(ia, ib, lane);
  if (lane == 31) {
    warp_a[warp] = ia;
    warp_b[warp] = ib;
  }
  __syncthreads();
  if (warp == 0) {
    const bool in = lane < static_cast<int>(blockDim.x >> 5);
    std::uint64_t sa = in ? warp_a[lane] : 0, sb = in ? warp_b[lane] : 0;
    warp_inclusive_scan_pair(sa, sb, lane);
    warp_a[lane] = sa;  // inclusive scans of the warp sums
    warp_b[lane] = sb;
  }
  __syncthreads();
  const int last = (blockDim.x >> 5) - 1;
  *before_a = (warp > 0 ? warp_a[warp - 1] : 0) + ia - a;
  *before_b = (warp > 0 ? warp_b[warp - 1] : 0) + ib - b;
  *total_a = warp_a[last];
  *total_b = warp_b[last];
}

}  // namespace aotinfer
