// Softmax with each row split across a cluster of kClusterCtas CTAs (sm_90 and later).
//
// Each CTA loads its slice of the row once into registers, reduces it to (max, sum), and
// the cluster exchanges those pairs through distributed shared memory; every CTA then
// writes its slice from registers. Each element is read once and written once -- the
// minimum traffic -- and a batch of 128 rows keeps 1024 CTAs busy instead of 128.
// Rows too long for the register budget use softmax.cuh's one-CTA-per-row kernel.
// Since the split pair (softmax_split.cuh) this kernel runs only when pinned
// (AOTINFER_SOFTMAX_KERNEL=cluster): the pair was faster at every benchmarked shape (batch 1 x
// 128256: 4.1 against 9.4 us; benchmarks/results/history/softmax-3404dd5-ftz-write.md).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/pdl.cuh"
#include "softmax.cuh"

namespace aotinfer::sampling {

constexpr int kClusterCtas = 8;
constexpr int kClusterThreads = 512;

// Elements per thread (compile-time, so the slice stays in registers): 8, 16, 32 or 64.
inline int cluster_softmax_elems(std::int64_t vocab) {
  for (int e : {8, 16, 32, 64}) {
    if (vocab <= static_cast<std::int64_t>(e) * kClusterThreads * kClusterCtas) return e;
  }
  return 0;  // too long: use the one-CTA-per-row kernel
}

namespace detail {

// kElems per thread, in groups of 8 consecutive elements (16-byte loads for 2-byte types).
template <typename T, int kElems>
__global__ void __launch_bounds__(kClusterThreads)
    softmax_cluster_kernel(const __grid_constant__ SoftmaxParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float pair[2];
  __shared__ int nan_flag;
  pdl_wait_for_prior_grid();
  const std::int64_t row = blockIdx.x / kClusterCtas;
  const int rank = static_cast<int>(cluster.block_rank());
  const float inv_t = p.inv_temperature(row);
  const T* in = p.logits + row * p.in_row_stride;
  float* out = p.probs + row * p.out_row_stride;
  // Slice of this CTA: groups of 8 interleaved over the cluster's threads.
  constexpr int kGroups = kElems / 8;
  float x[kElems];
  OnlineMax acc;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(in) % 16 == 0) && sizeof(T) == 2;
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
    const std::int64_t group = (static_cast<std::int64_t>(gi) * kClusterCtas + rank) * kClusterThreads + threadIdx.x;
    const std::int64_t base = group * 8;
    if (aligned && base + 8 <= p.vocab) {
      Vec<T, 8> v = *reinterpret_cast<const Vec<T, 8>*>(in + base);
#pragma unroll
      for (int j = 0; j < 8; ++j) x[gi * 8 + j] = to_float(v.v[j]) * inv_t;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[gi * 8 + j] = base + j < p.vocab ? to_float(in[base + j]) * inv_t : -INFINITY;
    }
    float gmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) gmax = fmaxf(gmax, x[gi * 8 + j]);
    acc.rescale_to(gmax);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc.add(x[gi * 8 + j]);
  }
  OnlineMax cta = block_merge(acc);
  if (threadIdx.x == 0) {
    pair[0] = cta.m;
    pair[1] = cta.s;
    nan_flag = cta.has_nan;
  }
  cluster.sync();
  OnlineMax total;
  if (threadIdx.x < 32) {
    OnlineMax mine;
    if (threadIdx.x < kClusterCtas) {
      const float* peer = cluster.map_shared_rank(pair, threadIdx.x);
      mine.m = peer[0];
      mine.s = peer[1];
      mine.has_nan = *cluster.map_shared_rank(&nan_flag, threadIdx.x) != 0;
    }
    for (int mask = 16; mask > 0; mask >>= 1) mine.merge(shfl_xor(mine, mask));
    total = mine;
  }
  cluster.sync();  // peers are done reading this CTA's shared memory
  __shared__ float row_m, row_inv_s;
  if (threadIdx.x == 0) {
    row_m = total.m;
    row_inv_s = total.has_nan ? NAN : 1.f / total.s;
  }
  __syncthreads();
  pdl_launch_dependents();
  const float m = row_m, inv_s = row_inv_s;
  const bool out_aligned = reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
    const std::int64_t group = (static_cast<std::int64_t>(gi) * kClusterCtas + rank) * kClusterThreads + threadIdx.x;
    const std::int64_t base = group * 8;
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = exp2f((x[gi * 8 + j] - m) * kLog2e) * inv_s;
    if (out_aligned && base + 8 <= p.vocab) {
      reinterpret_cast<float4*>(out + base)[0] = make_float4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<float4*>(out + base)[1] = make_float4(o[4], o[5], o[6], o[7]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (base + j < p.vocab) out[base + j] = o[j];
    }
  }
#endif
}

}  // namespace detail

// Launches the cluster softmax; the caller checked cluster_softmax_elems(vocab) != 0 and that
// the device is sm_90 or later.
template <typename T>
cudaError_t softmax_cluster(const SoftmaxParams<T>& params, int elems, bool enable_pdl, cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  void (*kernel)(SoftmaxParams<T>) = nullptr;
  switch (elems) {
    case 8: kernel = detail::softmax_cluster_kernel<T, 8>; break;
    case 16: kernel = detail::softmax_cluster_kernel<T, 16>; break;
    case 32: kernel = detail::softmax_cluster_kernel<T, 32>; break;
    case 64: kernel = detail::softmax_cluster_kernel<T, 64>; break;
    default: return cudaErrorInvalidValue;
  }
  return launch_in_clusters(kernel, dim3(static_cast<unsigned>(params.rows * kClusterCtas)), dim3(kClusterThreads), 0,
                            stream, enable_pdl, dim3(kClusterCtas, 1, 1), params);
}

}  // namespace aotinfer::sampling
