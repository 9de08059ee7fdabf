// pybind11 side of the view ABI: the core passes each tensor as the tuple
// (data_ptr, dtype_code, shape, strides, device_index); None stands for an absent tensor.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "tensor_view.h"

namespace aotinfer {

inline TensorView view_from_py(const pybind11::handle& obj) {
  auto t = pybind11::cast<pybind11::tuple>(obj);
  if (t.size() != 5) throw pybind11::value_error("a tensor view is a 5-tuple");
  TensorView v;
  v.data = t[0].cast<std::uintptr_t>();
  v.dtype = static_cast<DType>(t[1].cast<int>());
  v.shape = t[2].cast<std::vector<std::int64_t>>();
  v.strides = t[3].cast<std::vector<std::int64_t>>();
  v.device = t[4].cast<int>();
  return v;
}

inline std::optional<TensorView> optional_view_from_py(const pybind11::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  return view_from_py(obj);
}

}  // namespace aotinfer
