// Bulk copies from global to shared memory (cp.async.bulk, sm_90 and later) completed on a
// shared-memory mbarrier. One instruction moves a whole 16-byte-aligned block, so a CTA keeps
// many kilobytes in flight without holding them in registers: what a memory-bound pass over
// a long row needs to cover DRAM latency.
//
// Use (one-shot, one copy per barrier):
//   thread 0: mbarrier_init(bar, 1); then every thread: __syncthreads();
//   thread 0: mbarrier_arrive_expect_tx(bar, bytes); bulk_copy_to_shared(dst, src, bytes, bar);
//   thread 0: mbarrier_wait_parity(bar, 0); then every thread: __syncthreads();
// (one poller: polling threads take issue slots, threads in __syncthreads do not).
// On older targets these compile to nothing; callers launch them only on sm_90+.
#pragma once

#include <cstdint>

namespace aotinfer {

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
  // Makes the initialised barrier visible to the async proxy that completes the copy.
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Arrives once and announces `bytes` of incoming copies for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#endif
}

// dst and src 16-byte aligned, bytes a positive multiple of 16.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
#endif
}

__device__ __forceinline__ void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

}  // namespace aotinfer
