// Where a row kernel's elements live and how its threads combine results, so the filter
// passes (radix_threshold.cuh, filter_sample.cuh) are written once for two layouts:
//
// - RowScope: one CTA per row; every pass reads the row from global memory.
// - SliceScope (sm_90+): the row split over a cluster of kSliceCtas CTAs, each holding its
//   slice in shared memory, read from global memory once; reductions and histograms combine
//   across the cluster through distributed shared memory. A pass then costs shared-memory
//   bandwidth, and a batch of 128 rows keeps 1024 CTAs busy instead of 128.
//
// Both give every thread of every CTA the same results, in a fixed order (the same inputs
// always give the same bits).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "row_access.cuh"

namespace aotinfer::sampling {

template <typename T>
struct RowScope {
  const T* x;
  std::int64_t n;
  bool aligned;

  __device__ RowScope(const T* row, std::int64_t length) : x(row), n(length), aligned(group_aligned(row)) {}

  // f(g, v) for every group g (elements 4g .. 4g+3) this thread owns; tail elements = fill.
  template <typename F>
  __device__ void for_each_group(float fill, F&& f) const {
    for (std::int64_t g = threadIdx.x; g < (n + 3) / 4; g += blockDim.x) {
      float v[4];
      load_group4(x, n, g, aligned, fill, v);
      f(g, v);
    }
  }
  // Every thread of the scope has passed this point (and its shared-memory writes are seen).
  __device__ void sync() const { __syncthreads(); }
  template <typename V, typename Op>
  __device__ V reduce(V v, Op op, V identity) const {
    return block_reduce(v, op, identity);
  }
  // Bin i of a histogram every CTA of the scope built in its own shared memory.
  __device__ std::uint32_t bin(const std::uint32_t* hist, int i) const { return hist[i]; }
};

constexpr int kSliceCtas = 8;       // portable cluster size
constexpr int kSliceThreads = 512;  // two CTAs per SM at vocab 128256 (64 KB slices)

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // clusters: sm_90 and later
// The caller (a kernel launched with clusters of kSliceCtas) has copied this CTA's slice,
// groups [first, first + groups) of the row, into shared memory, tail elements as NaN
// (which every probability pass ignores, as it does the fill of RowScope).
struct SliceScope {
  const float4* s;
  std::int64_t groups;
  std::int64_t first;

  template <typename F>
  __device__ void for_each_group(float /*fill*/, F&& f) const {
    for (std::int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      const float4 q = s[g];
      float v[4] = {q.x, q.y, q.z, q.w};
      f(first + g, v);
    }
  }
  __device__ void sync() const { cooperative_groups::this_cluster().sync(); }
  template <typename V, typename Op>
  __device__ V reduce(V v, Op op, V identity) const {
    __shared__ V mine;
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    v = block_reduce(v, op, identity);
    if (threadIdx.x == 0) mine = v;
    cluster.sync();
    V acc = identity;
#pragma unroll
    for (unsigned r = 0; r < kSliceCtas; ++r) acc = op(acc, *cluster.map_shared_rank(&mine, r));
    cluster.sync();  // every peer has read `mine` before the next call rewrites it
    return acc;
  }
  __device__ std::uint32_t bin(const std::uint32_t* hist, int i) const {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    std::uint32_t total = 0;
#pragma unroll
    for (unsigned r = 0; r < kSliceCtas; ++r) total += *cluster.map_shared_rank(const_cast<std::uint32_t*>(hist) + i, r);
    return total;
  }
};
#endif

}  // namespace aotinfer::sampling
