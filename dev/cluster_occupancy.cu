// How many thread-block clusters of the decode kernel's shape fit on this card at once (a lab
// tool, GPU machine; no provider needed): cudaOccupancyMaxActiveClusters for a kernel of 128
// threads with the tensor-core decode kernel's dynamic shared memory at each head dim and
// depth (tc_smem_bytes), clusters of 2 to 8 CTAs along z, beside the CTAs that fit
// without clusters (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs). A cluster's CTAs
// share one GPC, so GPCs whose slots are not a multiple of the cluster size leave slots
// idle: this says whether a grid of clusters fits in one round.
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iproviders/csrc dev/cluster_occupancy.cu -o /tmp/co && /tmp/co
#include <cstdio>

#include "attention/decode_tc_kernel.cuh"
#include "common/launch_cache.h"

__global__ void shaped(int* sink) {
  extern __shared__ int smem[];
  if (threadIdx.x == 0 && sink) sink[blockIdx.x] = smem[0];
}

int main() {
  using aotinfer::attention::tc_smem_bytes;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int shapes[][3] = {{64, 4, 2}, {128, 3, 2}, {128, 2, 2}, {256, 3, 2}, {128, 3, 1}};
  for (const auto& s : shapes) {
    const int smem = static_cast<int>(tc_smem_bytes(s[0], s[1], s[2]));
    cudaFuncSetAttribute(shaped, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, shaped, 128, smem);
    std::printf("d%d depth %d kv %d B (%d B smem): %d CTAs an SM, %d slots;", s[0], s[1], s[2], smem, per_sm,
                per_sm * sms);
    for (unsigned z = 2; z <= 8; ++z) {
      int clusters = 0;  // the provider's own query (launch_cache.h)
      const cudaError_t err =
          aotinfer::cached_max_active_clusters<shaped>(&clusters, dim3(128), smem, z, /*device=*/0);
      std::printf("  clusters of %u: %d (%d CTAs)%s", z, clusters, clusters * z,
                  err == cudaSuccess ? "" : cudaGetErrorString(err));
    }
    std::printf("\n");
  }
  return 0;
}
