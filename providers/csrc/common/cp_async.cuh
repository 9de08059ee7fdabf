// Asynchronous global -> shared copies (cp.async, sm_80+): the copy lands in shared memory
// without passing through registers, so a thread can keep many in flight for free. On sm_75
// each is a plain load and store (same result, less overlap).
#pragma once

#include <cuda_runtime.h>

namespace aotinfer {

// 16-byte global -> shared copy; asynchronous (cp.async) on sm_80+, a plain load and store
// on sm_75, where the next tile's loads then overlap less but the result is the same.
// kL2Line: the L2::128B prefetch-size hint (L2 fetches the whole 128-byte line from DRAM),
// for streams that read every line whole; FlashInfer's attention kernels load with it.
template <bool kL2Line = false>
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill with zeros, read nothing
  if constexpr (kL2Line) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
  }
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}
// 4-byte global -> shared copy (a page id), asynchronous on sm_80+.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem));
#else
  *static_cast<int*>(smem) = *static_cast<const int*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}


}  // namespace aotinfer
