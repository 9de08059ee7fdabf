// Defensive checks on views at the provider boundary. The core validates first and gives
// the user-facing messages; these make a direct call into the provider fail with a
// ValueError instead of an illegal memory access.
#pragma once

#include <cstdint>
#include <string>

#include "status.h"
#include "tensor_view.h"

namespace aotinfer {

inline void check_rank(const TensorView& v, int rank, const char* op, const char* name) {
  if (v.ndim() != rank || v.strides.size() != v.shape.size()) {
    fail_argument(std::string(op) + ": " + name + " must have " + std::to_string(rank) +
                  " dimensions, got " + std::to_string(v.ndim()));
  }
}

inline void check_dtype(const TensorView& v, DType dtype, const char* op, const char* name) {
  if (v.dtype != dtype) {
    fail_argument(std::string(op) + ": " + name + " must be " + dtype_name(dtype) + ", got " +
                  dtype_name(v.dtype));
  }
}

inline void check_rows_dense(const TensorView& v, const char* op, const char* name) {
  if (!v.rows_dense()) {
    fail_argument(std::string(op) + ": " + name + " must have a contiguous last dimension");
  }
}

inline void check_length(const TensorView& v, std::int64_t n, const char* op, const char* name) {
  if (v.size(0) != n) {
    fail_argument(std::string(op) + ": " + name + " must have length " + std::to_string(n) +
                  ", got " + std::to_string(v.size(0)));
  }
}

inline void check_same_shape(const TensorView& a, const TensorView& b, const char* op,
                             const char* name_a, const char* name_b) {
  if (a.shape != b.shape) {
    fail_argument(std::string(op) + ": " + name_a + " must have the shape of " + name_b);
  }
}

inline void check_same_device(const TensorView& a, const TensorView& b, const char* op,
                              const char* name) {
  if (a.device != b.device) {
    fail_argument(std::string(op) + ": " + name + " is on cuda:" + std::to_string(a.device) +
                  ", expected cuda:" + std::to_string(b.device));
  }
}

}  // namespace aotinfer
