// Errors from CUDA calls and launches travel up as cudaError_t; the binding layer turns
// them into one Python exception that names the operation (see status.h).
#pragma once

#include <cuda_runtime.h>

#define AOTINFER_CUDA_TRY(expr)            \
  do {                                     \
    cudaError_t aotinfer_err_ = (expr);    \
    if (aotinfer_err_ != cudaSuccess) {    \
      return aotinfer_err_;                \
    }                                      \
  } while (0)

// After a <<<...>>> launch: a bad configuration shows up here, not as a later crash.
#define AOTINFER_LAUNCH_CHECK() AOTINFER_CUDA_TRY(cudaGetLastError())
