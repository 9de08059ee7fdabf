// pybind11 marshalling for the sampling family: views in, launcher calls out. No logic here.
// The Python-side signatures are the contract with core/aotinfer/sampling.py.
#include <pybind11/pybind11.h>

#include "../common/py_view.h"
#include "sampling_launchers.h"

namespace py = pybind11;

namespace aotinfer::sampling {
namespace {

// Owns the optional views a FilterArgs / RandomArgs points to.
struct FilterHolder {
  std::optional<TensorView> top_k, top_p, min_p;
  FilterArgs args;
  FilterHolder(int mode, py::handle k, std::int64_t k_scalar, py::handle p, float p_scalar, py::handle m,
               float m_scalar)
      : top_k(optional_view_from_py(k)), top_p(optional_view_from_py(p)), min_p(optional_view_from_py(m)) {
    if (mode < 0 || mode > static_cast<int>(FilterMode::kJoint)) throw py::value_error("unknown filter mode");
    args.mode = static_cast<FilterMode>(mode);
    args.top_k = top_k ? &*top_k : nullptr;
    // Clamp to int32: any k at or above the vocabulary means "no top-k filter" anyway.
    args.top_k_scalar = static_cast<std::int32_t>(k_scalar > INT32_MAX ? INT32_MAX : k_scalar);
    args.top_p = top_p ? &*top_p : nullptr;
    args.top_p_scalar = p_scalar;
    args.min_p = min_p ? &*min_p : nullptr;
    args.min_p_scalar = m_scalar;
  }
};

struct RandomHolder {
  std::optional<TensorView> seed, offset;
  RandomArgs args;
  RandomHolder(py::handle s, std::uint64_t s_scalar, py::handle o, std::uint64_t o_scalar)
      : seed(optional_view_from_py(s)), offset(optional_view_from_py(o)) {
    args.seed = seed ? &*seed : nullptr;
    args.seed_scalar = s_scalar;
    args.offset = offset ? &*offset : nullptr;
    args.offset_scalar = o_scalar;
  }
};

}  // namespace

void register_bindings(py::module_& m) {
  m.def(
      "softmax",
      [](py::handle logits, py::handle probs, py::handle temperature, float temperature_scalar,
         py::handle workspace, bool enable_pdl, std::uintptr_t stream) {
        const TensorView l = view_from_py(logits), p = view_from_py(probs), w = view_from_py(workspace);
        const auto t = optional_view_from_py(temperature);
        py::gil_scoped_release release;
        launch_softmax(l, p, t ? &*t : nullptr, temperature_scalar, w, enable_pdl, stream);
      },
      py::arg("logits"), py::arg("probs"), py::arg("temperature"), py::arg("temperature_scalar"),
      py::arg("workspace"), py::arg("enable_pdl"), py::arg("stream"));

  m.def(
      "sample",
      [](py::handle input, bool is_logits, py::handle indices, py::handle samples, py::handle valid,
         int filter_mode, py::handle top_k, std::int64_t top_k_scalar, py::handle top_p, float top_p_scalar,
         py::handle min_p, float min_p_scalar, py::handle seed, std::uint64_t seed_scalar, py::handle offset,
         std::uint64_t offset_scalar, std::uintptr_t stream) {
        const TensorView in = view_from_py(input), out = view_from_py(samples);
        const auto idx = optional_view_from_py(indices);
        const auto val = optional_view_from_py(valid);
        const FilterHolder f(filter_mode, top_k, top_k_scalar, top_p, top_p_scalar, min_p, min_p_scalar);
        const RandomHolder r(seed, seed_scalar, offset, offset_scalar);
        py::gil_scoped_release release;
        launch_sample(in, is_logits, idx ? &*idx : nullptr, out, val ? &*val : nullptr, f.args, r.args, stream);
      },
      py::arg("input"), py::arg("is_logits"), py::arg("indices"), py::arg("samples"), py::arg("valid"),
      py::arg("filter_mode"), py::arg("top_k"), py::arg("top_k_scalar"), py::arg("top_p"),
      py::arg("top_p_scalar"), py::arg("min_p"), py::arg("min_p_scalar"), py::arg("seed"),
      py::arg("seed_scalar"), py::arg("offset"), py::arg("offset_scalar"), py::arg("stream"));

  m.def(
      "renorm",
      [](py::handle input, py::handle out, int filter_mode, py::handle top_k, std::int64_t top_k_scalar,
         py::handle top_p, float top_p_scalar, std::uintptr_t stream) {
        const TensorView in = view_from_py(input), o = view_from_py(out);
        const FilterHolder f(filter_mode, top_k, top_k_scalar, top_p, top_p_scalar, py::none(), 0.f);
        py::gil_scoped_release release;
        launch_renorm(in, o, f.args, stream);
      },
      py::arg("input"), py::arg("out"), py::arg("filter_mode"), py::arg("top_k"), py::arg("top_k_scalar"),
      py::arg("top_p"), py::arg("top_p_scalar"), py::arg("stream"));

  m.def(
      "top_k_mask",
      [](py::handle logits, py::handle out, py::handle top_k, std::int64_t top_k_scalar, std::uintptr_t stream) {
        const TensorView in = view_from_py(logits), o = view_from_py(out);
        const FilterHolder f(static_cast<int>(FilterMode::kTopK), top_k, top_k_scalar, py::none(), 1.f,
                             py::none(), 0.f);
        py::gil_scoped_release release;
        launch_top_k_mask(in, o, f.args, stream);
      },
      py::arg("logits"), py::arg("out"), py::arg("top_k"), py::arg("top_k_scalar"), py::arg("stream"));

  m.def(
      "top_k_select",
      [](py::handle input, std::int64_t k, py::handle values, py::handle indices, std::uintptr_t stream) {
        const TensorView in = view_from_py(input), v = view_from_py(values), i = view_from_py(indices);
        py::gil_scoped_release release;
        launch_top_k_select(in, k, v, i, stream);
      },
      py::arg("input"), py::arg("k"), py::arg("values"), py::arg("indices"), py::arg("stream"));

  m.def(
      "chain_speculative",
      [](py::handle draft_probs, py::handle draft_ids, py::handle target_probs, py::handle out_ids,
         py::handle accepted, py::handle emitted, py::handle seed, std::uint64_t seed_scalar, py::handle offset,
         std::uint64_t offset_scalar, std::uintptr_t stream) {
        const TensorView dp = view_from_py(draft_probs), di = view_from_py(draft_ids),
                         tp = view_from_py(target_probs), oi = view_from_py(out_ids),
                         ac = view_from_py(accepted), em = view_from_py(emitted);
        const RandomHolder r(seed, seed_scalar, offset, offset_scalar);
        py::gil_scoped_release release;
        launch_chain_speculative(dp, di, tp, oi, ac, em, r.args, stream);
      },
      py::arg("draft_probs"), py::arg("draft_ids"), py::arg("target_probs"), py::arg("out_ids"),
      py::arg("accepted"), py::arg("emitted"), py::arg("seed"), py::arg("seed_scalar"), py::arg("offset"),
      py::arg("offset_scalar"), py::arg("stream"));
}

}  // namespace aotinfer::sampling
