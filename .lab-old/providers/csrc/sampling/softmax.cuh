// Softmax of logits / temperature, fp32/fp16/bf16 logits in, fp32 probabilities out.
//
// One CTA per row in one launch. Each thread keeps an online (max, sum) pair over its share
// of the row, rescaling its sum only when its own max grows; one
// block-wide merge then gives the row's (max, sum) and a second pass writes
// exp2((x - max) * log2(e)) / sum. Subtracting before scaling keeps large logits exact
// (x - max is exact when the two are close), as torch's fp32 softmax does. Loads are 16 bytes wide when the row is aligned for it.
//
// Numerics: -inf entries contribute 0 (the merge never forms -inf - -inf); any NaN in a
// row makes the whole row NaN, and a row of only -inf is NaN, both as torch.softmax does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/cuda_check.h"
#include "../common/pdl.cuh"

namespace aotinfer::sampling {

template <typename T>
struct SoftmaxParams {
  const T* logits;                 // (rows, vocab), row stride in_row_stride
  float* probs;                    // (rows, vocab), row stride out_row_stride
  const float* temperature_array;  // (rows,) or nullptr
  float temperature;               // used when temperature_array is nullptr
  std::int64_t rows;
  std::int64_t vocab;
  std::int64_t in_row_stride;
  std::int64_t out_row_stride;

  // 1 / the temperature of `row` (every softmax kernel scales by it).
  __device__ __forceinline__ float inv_temperature(std::int64_t row) const {
    return 1.f / (temperature_array != nullptr ? temperature_array[row] : temperature);
  }
};

namespace detail {

constexpr int kSoftmaxThreads = 1024;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Running (max, sum) of exp(x - max); has_nan poisons the row at the end.
struct OnlineMax {
  float m = -INFINITY;
  float s = 0.f;
  bool has_nan = false;

  // Folds a group of values whose largest is group_max; rescales only when the max grows.
  __device__ __forceinline__ void rescale_to(float group_max) {
    if (group_max > m) {
      s *= exp2f((m - group_max) * kLog2e);  // m == -inf gives 0 * 0, never NaN
      m = group_max;
    }
  }
  __device__ __forceinline__ void add(float x) {
    has_nan |= (x != x);
    if (m != -INFINITY) s += exp2f((x - m) * kLog2e);  // NaN here is caught by has_nan
  }
  __device__ __forceinline__ void merge(const OnlineMax& o) {
    float new_m = fmaxf(m, o.m);
    if (new_m == -INFINITY) {
      s = 0.f;
    } else {
      s = s * exp2f((m - new_m) * kLog2e) + o.s * exp2f((o.m - new_m) * kLog2e);
    }
    m = new_m;
    has_nan |= o.has_nan;
  }
};

__device__ __forceinline__ OnlineMax shfl_xor(const OnlineMax& v, int lane_mask) {
  OnlineMax o;
  o.m = __shfl_xor_sync(0xffffffffu, v.m, lane_mask);
  o.s = __shfl_xor_sync(0xffffffffu, v.s, lane_mask);
  o.has_nan = __shfl_xor_sync(0xffffffffu, static_cast<int>(v.has_nan), lane_mask) != 0;
  return o;
}

// Merges every thread's pair; all threads return the row's pair.
__device__ OnlineMax block_merge(OnlineMax v) {
  __shared__ float sm_m[32];
  __shared__ float sm_s[32];
  __shared__ int sm_nan[32];
  for (int mask = 16; mask > 0; mask >>= 1) v.merge(shfl_xor(v, mask));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm_m[warp] = v.m;
    sm_s[warp] = v.s;
    sm_nan[warp] = v.has_nan;
  }
  __syncthreads();
  OnlineMax w;
  if (lane < blockDim.x / 32) {
    w.m = sm_m[lane];
    w.s = sm_s[lane];
    w.has_nan = sm_nan[lane] != 0;
  }
  for (int mask = 16; mask > 0; mask >>= 1) w.merge(shfl_xor(w, mask));
  return w;
}

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

// kVec > 1 only when the row start and stride allow 16-byte accesses (checked by the host).
template <typename T, int kVec>
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(const __grid_constant__ SoftmaxParams<T> p) {
  pdl_wait_for_prior_grid();
  const std::int64_t row = blockIdx.x;
  const float inv_t = p.inv_temperature(row);
  const T* in = p.logits + row * p.in_row_stride;
  float* out = p.probs + row * p.out_row_stride;
  const std::int64_t n_vec = p.vocab / kVec;

  OnlineMax acc;
  for (std::int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    Vec<T, kVec> x = reinterpret_cast<const Vec<T, kVec>*>(in)[i];
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
  }
  for (std::int64_t i = n_vec * kVec + threadIdx.x; i < p.vocab; i += blockDim.x) {
    float f = to_float(in[i]) * inv_t;
    acc.rescale_to(f);
    acc.add(f);
  }
  const OnlineMax row_acc = block_merge(acc);
  pdl_launch_dependents();
  const float m = row_acc.m;
  const float inv_s = row_acc.has_nan ? NAN : 1.f / row_acc.s;

  // fp32 output: 4 floats per 16-byte store when the output row allows it.
  constexpr int kOutVec = kVec >= 4 ? 4 : 1;
  for (std::int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    Vec<T, kVec> x = reinterpret_cast<const Vec<T, kVec>*>(in)[i];
#pragma unroll
    for (int j = 0; j < kVec; j += kOutVec) {
      Vec<float, kOutVec> o;
#pragma unroll
      for (int k = 0; k < kOutVec; ++k) o.v[k] = exp2f((to_float(x.v[j + k]) * inv_t - m) * kLog2e) * inv_s;
      reinterpret_cast<Vec<float, kOutVec>*>(out + i * kVec + j)[0] = o;
    }
  }
  for (std::int64_t i = n_vec * kVec + threadIdx.x; i < p.vocab; i += blockDim.x) {
    out[i] = exp2f((to_float(in[i]) * inv_t - m) * kLog2e) * inv_s;
  }
}

}  // namespace detail

// Launches the softmax on `stream`. vectorized: the caller checked that logits rows start on
// 16-byte boundaries and probs rows on 16-byte boundaries.
template <typename T>
cudaError_t softmax(const SoftmaxParams<T>& params, bool vectorized, bool enable_pdl,
                    cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  constexpr int kVec = 16 / sizeof(T);
  auto kernel = vectorized ? detail::softmax_kernel<T, kVec> : detail::softmax_kernel<T, 1>;
  const dim3 grid(static_cast<unsigned>(params.rows));
  AOTINFER_CUDA_TRY(launch_with_pdl(kernel, grid, dim3(detail::kSoftmaxThreads), 0, stream,
                                    enable_pdl, params));
  return cudaSuccess;
}

}  // namespace aotinfer::sampling
