// Host facts a launcher needs on every call, fetched from the CUDA runtime once per device:
// each runtime query costs a microsecond or more, and decode's host-time goal is 15 us for
// the whole eager call.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace aotinfer {

constexpr int kMaxCachedDevices = 64;

// cudaDeviceGetAttribute(Attr, device), remembered per (attribute, device).
template <cudaDeviceAttr Attr>
inline cudaError_t cached_device_attribute(int* value, int device) {
  static std::atomic<int> cache[kMaxCachedDevices] = {};  // 0: not read yet (no attribute we use is 0)
  if (device < 0 || device >= kMaxCachedDevices) return cudaDeviceGetAttribute(value, Attr, device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    const cudaError_t err = cudaDeviceGetAttribute(&v, Attr, device);
    if (err != cudaSuccess) return err;
    cache[device].store(v, std::memory_order_relaxed);
  }
  *value = v;
  return cudaSuccess;
}

// Raises `bound` to `value` where it is below (a running maximum shared by threads).
inline void raise_to(std::atomic<int>& bound, int value) {
  int seen = bound.load(std::memory_order_relaxed);
  while (seen < value && !bound.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Lowers `bound` to `value` where it is above or unset (0): a running minimum.
inline void lower_to(std::atomic<int>& bound, int value) {
  int seen = bound.load(std::memory_order_relaxed);
  while ((seen == 0 || seen > value) && !bound.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Raises function attribute `Attr` of kernel `Kernel` on the current device (`device`) to at
// least `value`, calling the runtime only when a larger value than before is needed there (a
// function attribute is the device's, not the process's).
template <auto Kernel, cudaFuncAttribute Attr>
inline cudaError_t ensure_attribute_at_least(int value, int device) {
  static std::atomic<int> granted[kMaxCachedDevices] = {};
  if (device < 0 || device >= kMaxCachedDevices) return cudaFuncSetAttribute(Kernel, Attr, value);
  if (granted[device].load(std::memory_order_relaxed) >= value) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(Kernel, Attr, value);
  if (err == cudaSuccess) raise_to(granted[device], value);
  return err;
}

// Kernel `Kernel`'s dynamic shared-memory limit on the current device, at least `bytes`.
template <auto Kernel>
inline cudaError_t ensure_dynamic_smem(int bytes, int device) {
  return ensure_attribute_at_least<Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(bytes, device);
}

// Kernel `Kernel`'s preferred shared-memory carveout on the current device: the maximum.
template <auto Kernel>
inline cudaError_t ensure_max_shared_carveout(int device) {
  return ensure_attribute_at_least<Kernel, cudaFuncAttributePreferredSharedMemoryCarveout>(
      cudaSharedmemCarveoutMaxShared, device);
}

// cudaOccupancyMaxActiveClusters of kernel `Kernel` (its dynamic shared-memory limit already
// raised to `smem`) in clusters of `cluster_z` CTAs along z of `block` threads with `smem`
// bytes each: the clusters resident at once on `device`. Remembered per (device, cluster
// size) with the smem it was asked for; another smem asks again.
template <auto Kernel>
inline cudaError_t cached_max_active_clusters(int* clusters, dim3 block, int smem, unsigned cluster_z, int device) {
  constexpr unsigned kSizes = 9;  // cluster sizes 0..8 (portable clusters)
  static std::atomic<long long> cache[kMaxCachedDevices][kSizes] = {};  // (smem + 1) << 32 | clusters
  const bool cached = device >= 0 && device < kMaxCachedDevices && cluster_z < kSizes;
  if (cached) {
    const long long v = cache[device][cluster_z].load(std::memory_order_relaxed);
    if ((v >> 32) == static_cast<long long>(smem) + 1) {
      *clusters = static_cast<int>(v & 0xffffffff);
      return cudaSuccess;
    }
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1, 1, cluster_z);
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = cluster_z;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t err = cudaOccupancyMaxActiveClusters(clusters, Kernel, &config);
  if (err == cudaSuccess && cached)
    cache[device][cluster_z].store((static_cast<long long>(smem) + 1) << 32 | *clusters, std::memory_order_relaxed);
  return err;
}

}  // namespace aotinfer
