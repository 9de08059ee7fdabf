// pybind11 marshalling for the sampling family: views in, launcher calls out. No logic here.
#include <pybind11/pybind11.h>

#include "../common/py_view.h"
#include "sampling_launchers.h"

namespace py = pybind11;

namespace aotinfer::sampling {

void register_bindings(py::module_& m) {
  m.def(
      "softmax",
      [](py::handle logits, py::handle probs, py::handle temperature, float temperature_scalar,
         bool enable_pdl, std::uintptr_t stream) {
        const TensorView l = view_from_py(logits), p = view_from_py(probs);
        const auto t = optional_view_from_py(temperature);
        py::gil_scoped_release release;
        launch_softmax(l, p, t ? &*t : nullptr, temperature_scalar, enable_pdl, stream);
      },
      py::arg("logits"), py::arg("probs"), py::arg("temperature"), py::arg("temperature_scalar"),
      py::arg("enable_pdl"), py::arg("stream"),
      "softmax(logits, probs, temperature_or_None, temperature_scalar, enable_pdl, stream)");
}

}  // namespace aotinfer::sampling
