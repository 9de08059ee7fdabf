// Makes the tensor's device current for the duration of a launch and restores the
// caller's device afterwards, so a kernel on cuda:1 launches on cuda:1 whatever the
// current device is. The runtime is called again only when the device was switched: the
// common case (the tensor's device is already current) costs one cudaGetDevice, on the host
// time of every launch.
#pragma once

#include <cuda_runtime.h>

namespace aotinfer {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      status_ = cudaSetDevice(device);
      switched_ = status_ == cudaSuccess && previous_ >= 0;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace aotinfer
