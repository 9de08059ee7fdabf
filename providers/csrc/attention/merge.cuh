// Merging attention states (output, base-2 LSE): the split-KV combine and the public
// merge_states / merge_state_in_place. A state (o, s) stands for sum_j 2^(x_j) v_j / 2^s with
// s = log2 sum_j 2^(x_j); merging weights each state by 2^(s_i - max_i s_i).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/pdl.cuh"
#include "kv_types.cuh"

namespace aotinfer::attention {

constexpr int kMergeThreads = 128;

template <typename TIn, typename TOut>
struct MergeParams {
  const TIn* v;        // (N, S, H, D) with strides below
  std::int64_t v_stride_n, v_stride_s, v_stride_h;
  const float* s;      // (N, S, H) with strides below
  std::int64_t s_stride_n, s_stride_s, s_stride_h;
  TOut* v_out;         // (N, H, D)
  std::int64_t o_stride_n, o_stride_h;
  float* s_out;        // (N, H) contiguous or nullptr
  std::int64_t n, num_states, heads, dim;
  const float* sinks;  // (H) natural-log sink logits or nullptr
  float v_scale;
};

// The end of a merge: given the largest state LSE m (base 2) and denom = sum_i 2^(s_i - m),
// the factor that turns sum_i 2^(s_i - m) v_i into the output (v_scale / denominator, a
// head's sink logit joining the denominator) and the merged base-2 LSE.
struct MergedRow {
  float inv, lse;
};
__device__ __forceinline__ MergedRow merged_row(float m, float denom, const float* sinks, std::int64_t h,
                                                float v_scale) {
  MergedRow r{0.f, denom > 0.f ? m + log2f(denom) : -INFINITY};
  float total = denom;  // in units of 2^m
  if (sinks) {
    const float sink2 = sinks[h] * 1.4426950408889634f;
    if (denom > 0.f) {
      total = denom + exp2f(sink2 - m);
      r.lse = m + log2f(total);
    } else {
      r.lse = sink2;
    }
  }
  r.inv = total > 0.f ? v_scale / total : 0.f;
  return r;
}

// One CTA per (n, h): weights from the S LSEs, then a weighted sum over D columns.
// The loops over states are unrolled by kMergeUnroll with their loads made unconditional
// (every state's slot is in bounds; an empty state's weight is selected away, never
// multiplied), so a split-KV merge of 16-32 states waits on a few memory round trips
// rather than one per state: it sits on the critical path of every split decode.
constexpr int kMergeUnroll = 8;
template <typename TIn, typename TOut>
__global__ void __launch_bounds__(kMergeThreads) merge_states_kernel(const __grid_constant__ MergeParams<TIn, TOut> p) {
  pdl_wait_for_prior_grid();  // after a split decode launched with PDL: its partials are complete
  const std::int64_t n = blockIdx.x, h = blockIdx.y;
  const float* s = p.s + n * p.s_stride_n + h * p.s_stride_h;
#ifdef AOTINFER_LAB_MERGE_ONE_PASS
  const TIn* v1 = p.v + n * p.v_stride_n + h * p.v_stride_h;
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    float m1 = -INFINITY, den = 0.f, acc = 0.f;
#pragma unroll 16
    for (std::int64_t i = 0; i < p.num_states; ++i) {
      const float si = s[i * p.s_stride_s];
      const float vi = to_f32(v1[i * p.v_stride_s + d]);
      if (si == -INFINITY) continue;
      if (si > m1) {
        const float rescale = exp2f(m1 - si);
        den *= rescale;
        acc *= rescale;
        m1 = si;
      }
      const float wgt = exp2f(si - m1);
      den += wgt;
      acc += wgt * vi;
    }
    const MergedRow mr1 = merged_row(m1, den, p.sinks, h, p.v_scale);
    p.v_out[n * p.o_stride_n + h * p.o_stride_h + d] = from_f32<TOut>(acc * mr1.inv);
    if (p.s_out && d == 0) p.s_out[n * p.heads + h] = mr1.lse;
  }
  if (p.dim > 0) return;
#endif
  float m = -INFINITY;
#pragma unroll kMergeUnroll
  for (std::int64_t i = 0; i < p.num_states; ++i) m = fmaxf(m, s[i * p.s_stride_s]);
  float denom = 0.f;
#pragma unroll kMergeUnroll
  for (std::int64_t i = 0; i < p.num_states; ++i) {
    const float si = s[i * p.s_stride_s];
    denom += si == -INFINITY ? 0.f : exp2f(si - m);
  }
  const MergedRow mr = merged_row(m, denom, p.sinks, h, p.v_scale);
  const TIn* v = p.v + n * p.v_stride_n + h * p.v_stride_h;
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    float accum = 0.f;
#pragma unroll kMergeUnroll
    for (std::int64_t i = 0; i < p.num_states; ++i) {
      const float si = s[i * p.s_stride_s];
      const float vi = to_f32(v[i * p.v_stride_s + d]);
      accum += si == -INFINITY ? 0.f : exp2f(si - m) * vi;
    }
    p.v_out[n * p.o_stride_n + h * p.o_stride_h + d] = from_f32<TOut>(accum * mr.inv);
  }
  if (p.s_out && threadIdx.x == 0) p.s_out[n * p.heads + h] = mr.lse;
}

template <typename T>
struct MergeInPlaceParams {
  T* v;  // (N, H, D), last dim contiguous
  std::int64_t v_stride_n, v_stride_h;
  float* s;  // (N, H) strides
  std::int64_t s_stride_n, s_stride_h;
  const T* v_other;
  std::int64_t vo_stride_n, vo_stride_h;
  const float* s_other;
  std::int64_t so_stride_n, so_stride_h;
  const bool* mask;  // (N,) or nullptr
  std::int64_t n, heads, dim;
};

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) merge_state_in_place_kernel(const __grid_constant__ MergeInPlaceParams<T> p) {
  const std::int64_t n = blockIdx.x, h = blockIdx.y;
  if (p.mask && !p.mask[n]) return;
  const float sa = p.s[n * p.s_stride_n + h * p.s_stride_h];
  const float sb = p.s_other[n * p.so_stride_n + h * p.so_stride_h];
  const float m = fmaxf(sa, sb);
  const float wa = sa == -INFINITY ? 0.f : exp2f(sa - m), wb = sb == -INFINITY ? 0.f : exp2f(sb - m);
  const float total = wa + wb;
  __syncthreads();  // every thread read s before thread 0 overwrites it
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    T* va = p.v + n * p.v_stride_n + h * p.v_stride_h + d;
    const float a = to_f32(*va), bb = to_f32(p.v_other[n * p.vo_stride_n + h * p.vo_stride_h + d]);
    *va = from_f32<T>(total > 0.f ? (a * wa + bb * wb) / total : 0.f);
  }
  if (threadIdx.x == 0) p.s[n * p.s_stride_n + h * p.s_stride_h] = total > 0.f ? m + log2f(total) : -INFINITY;
}

}  // namespace aotinfer::attention
