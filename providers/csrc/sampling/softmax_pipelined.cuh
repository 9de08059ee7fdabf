// Softmax with one CTA per row whose loads go through a per-thread cp.async ring (sm_80+).
//
// Same math, order and bits as softmax.cuh's rowwise kernel (every thread folds the same
// vectors in the same order), but each thread keeps kStages 16-byte copies in flight
// instead of one load. Why: a batch of about one row per multiprocessor runs one 1024-thread
// CTA per SM, and with one 16-byte load in flight per thread (16 KB per SM) the first pass
// waited on DRAM latency: Nsight Compute read 43% of DRAM bandwidth and 20 cycles per issued
// instruction at 128 x 128256 (dev/NOTES.md). Copies land in shared memory without passing
// through registers, so the depth costs no registers (the register-held unroll of the same
// loads cost 28 registers and was slower). Each thread reads back only its own slots, so the
// ring needs no barrier: wait_group orders a thread's own copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/cp_async.cuh"
#include "../common/launch_cache.h"
#include "../common/pdl.cuh"
#include "softmax.cuh"

namespace aotinfer::sampling {
namespace detail {

// Dynamic shared memory of the pipelined kernel: kStages 16-byte slots per thread.
constexpr std::size_t pipelined_smem_bytes(int stages) {
  return static_cast<std::size_t>(stages) * kSoftmaxThreads * 16;
}

// f(k, v) for this thread's vectors k = 0 .. count-1 (vector tid + k * blockDim.x of src),
// in order, each copied through the thread's ring slots ring[s * blockDim.x] (ring points at
// the thread's slot 0).
template <int kStages, typename V, typename F>
__device__ __forceinline__ void stream_own_vectors(const V* src, std::int64_t count, uint4* ring, F&& f) {
  static_assert(sizeof(V) == 16, "one ring slot per vector");
  const std::int64_t stride = blockDim.x;
  const V* mine = src + threadIdx.x;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < count) cp_async16<true>(ring + s * stride, mine + s * stride, true);
    cp_async_commit();  // empty groups keep the wait count uniform
  }
  int slot = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    cp_async_wait<kStages - 1>();  // vector k has landed
    const V v = *reinterpret_cast<const V*>(ring + slot * stride);
    asm volatile("" ::: "memory");  // the slot is read before its refill is issued
    if (k + kStages < count) cp_async16<true>(ring + slot * stride, mine + (k + kStages) * stride, true);
    cp_async_commit();
    slot = slot + 1 == kStages ? 0 : slot + 1;
    f(k, v);
  }
  cp_async_wait<0>();
}

// Only for 16-byte-aligned rows (the host checks, as for softmax_kernel<T, kVec>).
// The 4-deep ring serves batches of more rows than SMs: two CTAs per SM, so 32 registers.
template <typename T, int kStages>
__global__ void __launch_bounds__(kSoftmaxThreads, kStages <= 4 ? 2 : 1)
    softmax_pipelined_kernel(const __grid_constant__ SoftmaxParams<T> p) {
  constexpr int kVec = 16 / sizeof(T);
  using V = Vec<T, kVec>;
  extern __shared__ __align__(16) uint4 ring_all[];
  uint4* ring = ring_all + threadIdx.x;
  pdl_wait_for_prior_grid();
  const std::int64_t row = blockIdx.x;
  const float inv_t =
      1.f / (p.temperature_array != nullptr ? p.temperature_array[row] : p.temperature);
  const T* in = p.logits + row * p.in_row_stride;
  float* out = p.probs + row * p.out_row_stride;
  const std::int64_t n_vec = p.vocab / kVec;
  const std::int64_t tid = threadIdx.x;
  const std::int64_t count = n_vec > tid ? (n_vec - tid + blockDim.x - 1) / blockDim.x : 0;
  const V* vin = reinterpret_cast<const V*>(in);

  OnlineMax acc;
  stream_own_vectors<kStages>(vin, count, ring, [&](std::int64_t, const V& x) {
    float f[kVec];
    float vmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      f[j] = to_float(x.v[j]) * inv_t;
      vmax = fmaxf(vmax, f[j]);
    }
    acc.rescale_to(vmax);
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc.add(f[j]);
  });
  for (std::int64_t i = n_vec * kVec + tid; i < p.vocab; i += blockDim.x) {
    float f = to_float(in[i]) * inv_t;
    acc.rescale_to(f);
    acc.add(f);
  }
  const OnlineMax row_acc = block_merge(acc);
  pdl_launch_dependents();
  const float m = row_acc.m;
  const float inv_s = row_acc.has_nan ? NAN : 1.f / row_acc.s;

  stream_own_vectors<kStages>(vin, count, ring, [&](std::int64_t k, const V& x) {
    const std::int64_t i = tid + k * blockDim.x;
#pragma unroll
    for (int j = 0; j < kVec; j += 4) {
      Vec<float, 4> o;
#pragma unroll
      for (int q = 0; q < 4; ++q) o.v[q] = exp2f((to_float(x.v[j + q]) * inv_t - m) * kLog2e) * inv_s;
      reinterpret_cast<Vec<float, 4>*>(out + i * kVec + j)[0] = o;
    }
  });
  for (std::int64_t i = n_vec * kVec + tid; i < p.vocab; i += blockDim.x) {
    out[i] = exp2f((to_float(in[i]) * inv_t - m) * kLog2e) * inv_s;
  }
}

}  // namespace detail

// kStages copies in flight per thread; the caller checked 16-byte alignment of both rows,
// sm_80+, and that pipelined_smem_bytes(kStages) fits the device.
template <typename T, int kStages>
cudaError_t softmax_pipelined(const SoftmaxParams<T>& params, bool enable_pdl, int device, cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  constexpr auto kernel = detail::softmax_pipelined_kernel<T, kStages>;
  constexpr int smem = static_cast<int>(detail::pipelined_smem_bytes(kStages));
  cudaError_t err = ensure_dynamic_smem<kernel>(smem, device);
  if (err != cudaSuccess) return err;
  return launch_with_pdl(kernel, dim3(static_cast<unsigned>(params.rows)), dim3(detail::kSoftmaxThreads), smem,
                         stream, enable_pdl, params);
}

}  // namespace aotinfer::sampling
