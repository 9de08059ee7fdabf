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
// and with a cluster shape other than (1, 1, 1), in thread-block clusters of that shape
// (sm_90+; the grid a multiple of it in every dimension).
template <typename Kernel, typename... Args>
cudaError_t launch_in_clusters(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               bool enable_pdl, dim3 cluster, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n].val.clusterDim.x = cluster.x;
    attributes[n].val.clusterDim.y = cluster.y;
    attributes[n].val.clusterDim.z = cluster.z;
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
  return launch_in_clusters(kernel, grid, block, smem, stream, enable_pdl, dim3(1, 1, 1), args...);
}

}  // namespace aotinfer
