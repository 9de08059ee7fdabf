// Element types of the decode kernels and their conversions to float, 8 elements at a time
// from shared memory (the unit the score and value loops consume).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace aotinfer::attention {

__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }

// 8 consecutive elements of T, loaded with one 16-byte (2-byte T) or 8-byte (fp8) access.
template <typename T>
struct alignas(8 * sizeof(T)) Pack8 {
  T v[8];
};

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  const Pack8<T> pk = *reinterpret_cast<const Pack8<T>*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(pk.v[i]);
}

template <typename T>
constexpr bool kIsFp8 = std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>;

// Four fp8 values (the bytes of w, lowest first) as four halves in two registers, lowest
// first. Exact: every e4m3 and e5m2 value is a half (one cvt per pair on sm_89+).
template <typename KVT>
__device__ __forceinline__ uint2 fp8x4_to_half4(std::uint32_t w) {
  constexpr __nv_fp8_interpretation_t kKind = std::is_same_v<KVT, __nv_fp8_e4m3> ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), kKind);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), kKind);
  return make_uint2(lo.x | (static_cast<unsigned>(lo.y) << 16), hi.x | (static_cast<unsigned>(hi.y) << 16));
}

}  // namespace aotinfer::attention
