// From the launcher's type-erased arguments to one decode kernel instantiation. Included by
// decode_d64.cu / decode_d128.cu / decode_d256.cu, one head dim each, so the three compile in
// parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/launch_cache.h"
#include "../common/tensor_view.h"
#include "decode_kernel.cuh"
#include "decode_tc_kernel.cuh"

namespace aotinfer::attention {

// The launcher's parameter block: every DecodeParams member with untyped q, k, v and out,
// plus where and how to launch.
struct RawDecode : DecodeParams<void, void> {
  int device;  // where the launch goes (current device)
  bool pdl;    // launch with programmatic dependent launch (sm_90+)
  // Where set, receives the launch's cluster_merge once kClustersIfResident is resolved (1:
  // the grid ran in clusters; 0: it did not, and the caller merges the splits another way).
  int* cluster_merge_used = nullptr;
};

// DecodeParams<void, void> and DecodeParams<QT, KVT> declare the same members in the same
// order and differ only in the pointee types of four pointers, so they have one layout: the
// typed block is the untyped one's bytes.
template <typename QT, typename KVT>
DecodeParams<QT, KVT> typed_params(const RawDecode& r) {
  using Untyped = DecodeParams<void, void>;
  static_assert(sizeof(DecodeParams<QT, KVT>) == sizeof(Untyped) &&
                    std::is_trivially_copyable_v<DecodeParams<QT, KVT>> && std::is_trivially_copyable_v<Untyped>,
                "typed and untyped decode parameters must share one layout");
  DecodeParams<QT, KVT> p;
  std::memcpy(&p, static_cast<const Untyped*>(&r), sizeof(p));
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

template <typename T, typename KVT, int D>
cudaError_t launch_decode_tc_typed(const RawDecode& r, dim3 grid, cudaStream_t stream) {
  DecodeParams<T, KVT> p = typed_params<T, KVT>(r);
  const int smem = static_cast<int>(tc_smem_bytes(D, r.stages, static_cast<int>(sizeof(KVT))));
  cudaError_t err = ensure_dynamic_smem<decode_tc_kernel<T, KVT, D>>(smem, r.device);
  if (err != cudaSuccess) return err;
  // A cluster merge groups the splits (grid z) of each (request, row block, KV head), only
  // where every cluster is resident at once (decode_launch.cu, use_cluster_merge).
  if (p.cluster_merge == kClustersIfResident) {
    int fit = 0;
    err = cached_max_active_clusters<decode_tc_kernel<T, KVT, D>>(&fit, dim3(kTcThreads), smem, grid.z, r.device);
    if (err != cudaSuccess) return err;
    p.cluster_merge = static_cast<std::int64_t>(grid.x) * grid.y <= fit ? 1 : 0;
  }
  if (r.cluster_merge_used) *r.cluster_merge_used = p.cluster_merge;
  const dim3 cluster(1, 1, p.cluster_merge ? grid.z : 1);
  return launch_in_clusters(decode_tc_kernel<T, KVT, D>, grid, dim3(kTcThreads), static_cast<size_t>(smem), stream,
                            r.pdl, cluster, p);
}

// The tensor-core kernel for one head dim and q's type T: KV in q's dtype (fp16 or bf16) or
// fp8 (e4m3, e5m2).
template <typename T, int D>
cudaError_t launch_decode_tc_q(const RawDecode& r, DType kv, dim3 grid, cudaStream_t stream) {
  constexpr DType kSame = std::is_same_v<T, __half> ? DType::kFloat16 : DType::kBFloat16;
  if (kv == kSame) return launch_decode_tc_typed<T, T, D>(r, grid, stream);
  if (kv == DType::kFloat8E4M3) return launch_decode_tc_typed<T, __nv_fp8_e4m3, D>(r, grid, stream);
  if (kv == DType::kFloat8E5M2) return launch_decode_tc_typed<T, __nv_fp8_e5m2, D>(r, grid, stream);
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t launch_decode_tc_dim(const RawDecode& r, DType q, DType kv, dim3 grid, cudaStream_t stream) {
  if (q == DType::kFloat16) return launch_decode_tc_q<__half, D>(r, kv, grid, stream);
  if (q == DType::kBFloat16) return launch_decode_tc_q<__nv_bfloat16, D>(r, kv, grid, stream);
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
  const bool fp8 = is_fp8(kv);
  if (q == DType::kFloat16) return fp8 ? sizeof(DecodeSmem<__half, __nv_fp8_e4m3, D>) : sizeof(DecodeSmem<__half, __half, D>);
  return fp8 ? sizeof(DecodeSmem<__nv_bfloat16, __nv_fp8_e4m3, D>) : sizeof(DecodeSmem<__nv_bfloat16, __nv_bfloat16, D>);
}

// One translation unit per head dim (they compile in parallel). `tensor_cores`: the
// tensor-core kernel (KV in q's dtype, r.stages set), else the CUDA-core one.
cudaError_t launch_decode_d64(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);
cudaError_t launch_decode_d128(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);
cudaError_t launch_decode_d256(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid, cudaStream_t stream);

}  // namespace aotinfer::attention
