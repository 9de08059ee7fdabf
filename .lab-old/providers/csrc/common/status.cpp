// Implementation of the host-side error helpers declared in status.h.
#include "status.h"

#include <string>

#include "tensor_view.h"

namespace aotinfer {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
    case DType::kUInt64: return "uint64";
  }
  return "unknown";
}

void throw_on_cuda_error(cudaError_t err, const char* op, int device) {
  if (err == cudaSuccess) return;
  std::string message = std::string("aotinfer ") + op + " on cuda:" + std::to_string(device) +
                        " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion) {
    message += " (this provider holds no SASS for the device; run `aotinfer show-config` to see "
               "which provider serves it)";
  }
  throw CudaError(message);
}

void fail_argument(const std::string& message) { throw ArgumentError(message); }

}  // namespace aotinfer
