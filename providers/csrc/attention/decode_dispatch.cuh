// From the launcher's type-erased arguments to one decode kernel instantiation. Included by
// decode_d64.cu / decode_d128.cu / decode_d256.cu, one head dim each, so the three compile in
// parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../common/launch_cache.h"
#include "../common/tensor_view.h"
#include "decode_kernel.cuh"
#include "decode_tc_kernel.cuh"

namespace aotinfer::attention {

// Every DecodeParams field, with untyped pointers.
struct RawDecode {
  const void* q;
  std::int64_t q_stride_row, q_stride_head;
  const void* k;
  const void* v;
  std::int64_t k_stride_page, k_stride_slot, k_stride_head;
  std::int64_t v_stride_page, v_stride_slot, v_stride_head;
  const std::int32_t* indptr;
  const std::int32_t* indices;
  const std::int32_t* last_page_len;
  std::int64_t page_size, kv_len_scalar, num_pages;
  void* out;
  std::int64_t out_stride_row, out_stride_head;
  float* lse;
  float* partial_out;
  float* partial_lse;
  std::int64_t chunk_pages, splits, q_len, num_qo_heads, num_kv_heads, group;
  float sm_scale, soft_cap;
  std::int64_t window_left;
  int pos_encoding;
  float rope_log2_theta, rope_inv_scale;
  const float* alibi_slopes;
  float v_scale;
  const float* sinks;
  int stages;  // tensor-core kernel only
  int device;  // where the launch goes (current device)
  bool pdl;    // launch with programmatic dependent launch (sm_90+)
};

template <typename QT, typename KVT>
DecodeParams<QT, KVT> typed_params(const RawDecode& r) {
  DecodeParams<QT, KVT> p;
  p.q = static_cast<const QT*>(r.q);
  p.q_stride_row = r.q_stride_row;
  p.q_stride_head = r.q_stride_head;
  p.k = static_cast<const KVT*>(r.k);
  p.v = static_cast<const KVT*>(r.v);
  p.k_stride_page = r.k_stride_page;
  p.k_stride_slot = r.k_stride_slot;
  p.k_stride_head = r.k_stride_head;
  p.v_stride_page = r.v_stride_page;
  p.v_stride_slot = r.v_stride_slot;
  p.v_stride_head = r.v_stride_head;
  p.indptr = r.indptr;
  p.indices = r.indices;
  p.last_page_len = r.last_page_len;
  p.page_size = r.page_size;
  p.kv_len_scalar = r.kv_len_scalar;
  p.num_pages = r.num_pages;
  p.out = static_cast<QT*>(r.out);
  p.out_stride_row = r.out_stride_row;
  p.out_stride_head = r.out_stride_head;
  p.lse = r.lse;
  p.partial_out = r.partial_out;
  p.partial_lse = r.partial_lse;
  p.chunk_pages = r.chunk_pages;
  p.splits = r.splits;
  p.q_len = r.q_len;
  p.num_qo_heads = r.num_qo_heads;
  p.num_kv_heads = r.num_kv_heads;
  p.group = r.group;
  p.sm_scale = r.sm_scale;
  p.soft_cap = r.soft_cap;
  p.window_left = r.window_left;
  p.pos_encoding = r.pos_encoding;
  p.rope_log2_theta = r.rope_log2_theta;
  p.rope_inv_scale = r.rope_inv_scale;
  p.alibi_slopes = r.alibi_slopes;
  p.v_scale = r.v_scale;
  p.sinks = r.sinks;
  p.stages = r.stages;
  return p;
}

template <typename QT, typename KVT, int D>
cudaError_t launch_decode_typed(const RawDecode& r, dim3 grid, cudaStream_t stream) {
  const DecodeParams<QT, KVT> p = typed_params<QT, KVT>(r);
  constexpr int kSmem = sizeof(DecodeSmem<QT, KVT, D>);
  cudaError_t err = ensure_dynamic_smem<decode_kernel<QT, KVT, D>>(kSmem, r.device);
  if (err != cudaSuccess) return err;
  return launch_with_pdl(decode_kernel<QT, KVT, D>, grid, dim3(kDecodeThreads), kSmem, stream, r.pdl, p);
}

template <typename T, int D>
cudaError_t launch_decode_tc_typed(const RawDecode& r, dim3 grid, cudaStream_t stream) {
  const DecodeParams<T, T> p = typed_params<T, T>(r);
  const int smem = static_cast<int>(tc_smem_bytes(D, r.stages));
  cudaError_t err = ensure_dynamic_smem<decode_tc_kernel<T, D>>(smem, r.device);
  if (err != cudaSuccess) return err;
  return launch_with_pdl(decode_tc_kernel<T, D>, grid, dim3(kTcThreads), static_cast<size_t>(smem), stream, r.pdl,
                         p);
}

// The tensor-core kernel for one head dim: KV in q's dtype (fp16 or bf16).
template <int D>
cudaError_t launch_decode_tc_dim(const RawDecode& r, DType q, dim3 grid, cudaStream_t stream) {
  if (q == DType::kFloat16) return launch_decode_tc_typed<__half, D>(r, grid, stream);
  if (q == DType::kBFloat16) return launch_decode_tc_typed<__nv_bfloat16, D>(r, grid, stream);
  return cudaErrorInvalidValue;
}

// Dispatches query dtype x KV dtype for one head dim; returns cudaErrorInvalidValue for a pair
// that is not built (the launcher has already rejected those with a clear message).
template <int D>
cudaError_t launch_decode_dim(const RawDecode& r, DType q, DType kv, dim3 grid, cudaStream_t stream) {
  if (q == DType::kFloat16) {
    if (kv == DType::kFloat16) return launch_decode_typed<__half, __half, D>(r, grid, stream);
    if (kv == DType::kFloat8E4M3) return launch_decode_typed<__half, __nv_fp8_e4m3, D>(r, grid, stream);
    if (kv == DType::kFloat8E5M2) return launch_decode_typed<__half, __nv_fp8_e5m2, D>(r, grid, stream);
  } else if (q == DType::kBFloat16) {
    if (kv == DType::kBFloat16) return launch_decode_typed<__nv_bfloat16, __nv_bfloat16, D>(r, grid, stream);
    if (kv == DType::kFloat8E4M3) return launch_decode_typed<__nv_bfloat16, __nv_fp8_e4m3, D>(r, grid, stream);
    if (kv == DType::kFloat8E5M2) return launch_decode_typed<__nv_bfloat16, __nv_fp8_e5m2, D>(r, grid, stream);
  }
  return cudaErrorInvalidValue;
}

// Shared memory one CTA of the (q, kv, D) variant needs, so the launcher can refuse a variant
// the device cannot hold (sm_75 allows 64 KB) with a clear message before any launch.
template <int D>
std::size_t decode_smem_dim(DType q, DType kv) {
  const bool fp8 = kv == DType::kFloat8E4M3 || kv == DType::kFloat8E5M2;
  if (q == DType::kFloat16) return fp8 ? sizeof(DecodeSmem<__half, __nv_fp8_e4m3, D>) : sizeof(DecodeSmem<__half, __half, D>);
  return fp8 ? sizeof(DecodeSmem<__nv_bfloat16, __nv_fp8_e4m3, D>) : sizeof(DecodeSmem<__nv_bfloat16, __nv_bfloat16, D>);
}

// One translation unit per head dim (they compile in parallel). `tensor_cores`: the
// tensor-core kernel (KV in q's dtype, r.stages set), else the CUDA-core one.
cudaError_t launch_decode_d64(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);
cudaError_t launch_decode_d128(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);
cudaError_t launch_decode_d256(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);

}  // namespace aotinfer::attention
