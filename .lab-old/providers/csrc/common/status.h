// Host-side error helpers shared by every launcher: bad arguments become
// aotinfer::ArgumentError (ValueError in Python), CUDA failures become
// aotinfer::CudaError (RuntimeError) carrying the operation name and CUDA's text.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace aotinfer {

struct ArgumentError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws CudaError for any failure; "no kernel image" gets the words a user can act on.
void throw_on_cuda_error(cudaError_t err, const char* op, int device);

[[noreturn]] void fail_argument(const std::string& message);

}  // namespace aotinfer
