// Decode kernels (tensor-core and CUDA-core) for head dim 128: fp16/bf16 queries x same-dtype/fp8 e4m3/fp8 e5m2 KV.
#include "decode_dispatch.cuh"

namespace aotinfer::attention {

cudaError_t launch_decode_d128(const RawDecode& r, DType q, DType kv, bool tensor_cores, dim3 grid,
                             cudaStream_t stream) {
  if (tensor_cores) return launch_decode_tc_dim<128>(r, q, kv, grid, stream);
  return launch_decode_dim<128>(r, q, kv, grid, stream);
}

}  // namespace aotinfer::attention
