// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched with it may start
// while the previous kernel in the stream finishes; it waits for that kernel's results at
// pdl_wait_for_prior_grid() and lets the next kernel start at pdl_launch_dependents().
// On older targets both are no-ops and the launch attribute is left off. The launch helpers
// below also set up thread-block clusters, the other launch attribute the providers use.
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

// Launches kernel(args...) on `stream`; with enable_pdl, as a programmatic dependent launch,
// and with cluster_x > 1, in thread-block clusters of cluster_x CTAs along x (sm_90+).
template <typename Kernel, typename... Args>
cudaError_t launch_with_attributes(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                   bool enable_pdl, unsigned cluster_x, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned n = 0;
  if (cluster_x > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n].val.clusterDim.x = cluster_x;
    attributes[n].val.clusterDim.y = 1;
    attributes[n].val.clusterDim.z = 1;
    ++n;
  }
  if (enable_pdl) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  config.attrs = attributes;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename Kernel, typename... Args>
cudaError_t launch_with_pdl(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            bool enable_pdl, const Args&... args) {
  return launch_with_attributes(kernel, grid, block, smem, stream, enable_pdl, 1u, args...);
}

}  // namespace aotinfer
