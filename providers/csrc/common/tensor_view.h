// A framework-free view of a tensor: what the core passes for every tensor argument.
// Providers never see torch; the core turns each torch.Tensor into
// (data_ptr, dtype code, shape, strides in elements, device index) and this struct holds it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aotinfer {

// Dtype codes shared with core/aotinfer/_views.py (DTYPE_CODES); keep both in step.
enum class DType : int {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUInt8 = 5,
  kBool = 6,
  kFloat8E4M3 = 7,
  kFloat8E5M2 = 8,
  kUInt64 = 9,
};

const char* dtype_name(DType dtype);

struct TensorView {
  std::uintptr_t data = 0;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements, like torch
  int device = -1;

  int ndim() const { return static_cast<int>(shape.size()); }
  std::int64_t size(int dim) const { return shape.at(dim < 0 ? dim + ndim() : dim); }
  std::int64_t stride(int dim) const { return strides.at(dim < 0 ? dim + ndim() : dim); }
  template <typename T>
  T* ptr() const { return reinterpret_cast<T*>(data); }
  // Innermost dimension dense (stride 1), the layout every kernel here reads rows in.
  bool rows_dense() const { return ndim() == 0 || stride(-1) == 1 || size(-1) == 1; }
};

}  // namespace aotinfer
