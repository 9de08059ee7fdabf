// A framework-free view of a tensor: what the core passes for every tensor argument.
// Providers never see torch; the core turns each torch.Tensor into
// (data_ptr, dtype code, shape, strides in elements, device index) and this struct holds it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace aotinfer {

constexpr std::size_t kMaxDims = 8;  // the core passes tensors of rank 5 at most

// A view's shape or strides, held inline rather than in a std::vector: every call parses its
// views on the host path (a decode call about a dozen, each with a shape and strides), and
// two heap allocations per view, more for each copy, are host time spent on nothing.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<std::int64_t> values) {
    resize(values.size());
    std::copy(values.begin(), values.end(), v_);
  }

  std::size_t size() const { return n_; }
  void resize(std::size_t n) {
    // std::length_error reaches Python as a ValueError (pybind11's translation)
    if (n > kMaxDims) throw std::length_error("a tensor view has at most 8 dimensions");
    n_ = n;
  }
  std::int64_t& operator[](std::size_t i) { return v_[i]; }
  std::int64_t operator[](std::size_t i) const { return v_[i]; }
  std::int64_t at(std::size_t i) const {
    if (i >= n_) throw std::out_of_range("tensor view dimension out of range");
    return v_[i];
  }
  const std::int64_t* begin() const { return v_; }
  const std::int64_t* end() const { return v_ + n_; }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }

 private:
  std::int64_t v_[kMaxDims] = {};
  std::size_t n_ = 0;
};

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
inline bool is_fp8(DType dtype) { return dtype == DType::kFloat8E4M3 || dtype == DType::kFloat8E5M2; }

struct TensorView {
  std::uintptr_t data = 0;
  DType dtype = DType::kFloat32;
  Dims shape;
  Dims strides;  // in elements, like torch
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
