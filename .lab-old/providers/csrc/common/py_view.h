// pybind11 side of the view ABI: the core passes each tensor as the tuple
// (data_ptr, dtype_code, shape, strides, device_index); None stands for an absent tensor.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "tensor_view.h"

namespace aotinfer {

namespace detail {

// Straight CPython calls rather than pybind11's generic casters (the sequence protocol and
// one cast per item): a decode call passes about a dozen views, all on the host time of
// every call. (Not timed against the casters in one process: dev/NOTES.md item 24.)
inline std::int64_t py_int64(PyObject* o) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw pybind11::error_already_set();
  return v;
}

inline void py_int_tuple(PyObject* o, Dims& out) {
  if (!PyTuple_Check(o)) throw pybind11::value_error("a tensor view's shape and strides are tuples of ints");
  const Py_ssize_t n = PyTuple_GET_SIZE(o);
  out.resize(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = py_int64(PyTuple_GET_ITEM(o, i));
}

}  // namespace detail

inline TensorView view_from_py(const pybind11::handle& obj) {
  PyObject* t = obj.ptr();
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) throw pybind11::value_error("a tensor view is a 5-tuple");
  TensorView v;
  const unsigned long long data = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 0));
  if (data == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw pybind11::error_already_set();
  v.data = static_cast<std::uintptr_t>(data);
  v.dtype = static_cast<DType>(detail::py_int64(PyTuple_GET_ITEM(t, 1)));
  detail::py_int_tuple(PyTuple_GET_ITEM(t, 2), v.shape);
  detail::py_int_tuple(PyTuple_GET_ITEM(t, 3), v.strides);
  v.device = static_cast<int>(detail::py_int64(PyTuple_GET_ITEM(t, 4)));
  return v;
}

inline std::optional<TensorView> optional_view_from_py(const pybind11::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  return view_from_py(obj);
}

}  // namespace aotinfer
