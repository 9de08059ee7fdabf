// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched with it may start
// while the previous kernel in the stream finishes; it waits for that kernel's results at
// pdl_wait_for_prior_grid() and lets the next kernel start at pdl_launch_dependents().
// On older targets both are no-ops and the launch attribute is left off.
#pragma once

#include <cuda_runtime.h>

namespace aotinfer {

__device__ __forceinline__ void pdl_wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename Kernel, typename... Args>
cudaError_t launch_with_pdl(Kernel kernel, dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, bool enable_pdl, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = enable_pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace aotinfer
