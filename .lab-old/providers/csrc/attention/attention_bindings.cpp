// pybind11 marshalling for the decode-attention family: views in, launcher calls out. The
// Python-side signatures are documented in decode_launchers.h.
#include <pybind11/pybind11.h>

#include "../common/py_view.h"
#include "decode_launchers.h"

namespace py = pybind11;

namespace aotinfer::attention {
namespace {

const TensorView* opt(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

// batch_decode's arguments parsed from Python: the views, owned here, and the DecodeArgs
// that point at them (so DecodeArgs must not outlive this object).
struct ParsedDecode {
  TensorView q, k, v, out;
  std::optional<TensorView> indptr, indices, last_page_len, lse, partial_out, partial_lse, work, split_counts,
      arrivals, alibi_slopes, sinks;
  DecodeArgs a{};

  ParsedDecode(py::handle q_, py::handle k_cache, py::handle v_cache, int kv_layout, std::int64_t page_size,
               py::handle indptr_, py::handle indices_, py::handle last_page_len_, std::int64_t kv_len_scalar,
               py::handle out_, py::handle lse_, py::handle partial_out_, py::handle partial_lse_, py::handle work_,
               py::handle split_counts_, py::handle arrivals_, std::int64_t chunk_pages, std::int64_t max_splits,
               std::int64_t q_len_per_req, float sm_scale, float logits_soft_cap, std::int64_t window_left,
               int pos_encoding_mode, float rope_scale, float rope_theta, py::handle alibi_slopes_, float k_scale,
               float v_scale, py::handle sinks_) {
    if (kv_layout != 0 && kv_layout != 1) throw py::value_error("kv_layout must be 0 (NHD) or 1 (HND)");
    if (pos_encoding_mode < 0 || pos_encoding_mode > 2) throw py::value_error("unknown pos_encoding_mode");
    q = view_from_py(q_);
    k = view_from_py(k_cache);
    v = view_from_py(v_cache);
    out = view_from_py(out_);
    indptr = optional_view_from_py(indptr_);
    indices = optional_view_from_py(indices_);
    last_page_len = optional_view_from_py(last_page_len_);
    lse = optional_view_from_py(lse_);
    partial_out = optional_view_from_py(partial_out_);
    partial_lse = optional_view_from_py(partial_lse_);
    alibi_slopes = optional_view_from_py(alibi_slopes_);
    sinks = optional_view_from_py(sinks_);
    work = optional_view_from_py(work_);
    split_counts = optional_view_from_py(split_counts_);
    arrivals = optional_view_from_py(arrivals_);
    a.q = &q;
    a.k_cache = &k;
    a.v_cache = &v;
    a.layout = static_cast<KvLayout>(kv_layout);
    a.page_size = page_size;
    a.indptr = opt(indptr);
    a.indices = opt(indices);
    a.last_page_len = opt(last_page_len);
    a.kv_len_scalar = kv_len_scalar;
    a.out = &out;
    a.lse = opt(lse);
    a.partial_out = opt(partial_out);
    a.partial_lse = opt(partial_lse);
    a.work = opt(work);
    a.split_counts = opt(split_counts);
    a.arrivals = opt(arrivals);
    a.chunk_pages = chunk_pages;
    a.max_splits = max_splits;
    a.q_len_per_req = q_len_per_req;
    a.sm_scale = sm_scale;
    a.logits_soft_cap = logits_soft_cap;
    a.window_left = window_left;
    a.pos_encoding = static_cast<PosEncoding>(pos_encoding_mode);
    a.rope_scale = rope_scale;
    a.rope_theta = rope_theta;
    a.alibi_slopes = opt(alibi_slopes);
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.sinks = opt(sinks);
  }
  ParsedDecode(const ParsedDecode&) = delete;
  ParsedDecode& operator=(const ParsedDecode&) = delete;
};

// Python's handle of a prepared call (PreparedDecode is opaque here; its deleter comes from
// decode_launch.cu, where it was made).
struct PreparedDecodeHandle {
  std::shared_ptr<const PreparedDecode> prepared;
};

}  // namespace

void register_bindings(py::module_& m) {
  m.def(
      "batch_decode",
      [](py::handle q, py::handle k_cache, py::handle v_cache, int kv_layout, std::int64_t page_size,
         py::handle indptr, py::handle indices, py::handle last_page_len, std::int64_t kv_len_scalar, py::handle out,
         py::handle lse, py::handle partial_out, py::handle partial_lse, py::handle work, py::handle split_counts,
         py::handle arrivals, std::int64_t chunk_pages, std::int64_t max_splits, std::int64_t q_len_per_req,
         float sm_scale, float logits_soft_cap,
         std::int64_t window_left, int pos_encoding_mode, float rope_scale, float rope_theta, py::handle alibi_slopes,
         float k_scale, float v_scale, py::handle sinks, std::uintptr_t stream) {
        const ParsedDecode parsed(q, k_cache, v_cache, kv_layout, page_size, indptr, indices, last_page_len,
                                  kv_len_scalar, out, lse, partial_out, partial_lse, work, split_counts, arrivals,
                                  chunk_pages, max_splits, q_len_per_req, sm_scale, logits_soft_cap, window_left,
                                  pos_encoding_mode, rope_scale, rope_theta, alibi_slopes, k_scale, v_scale, sinks);
        py::gil_scoped_release release;
        launch_batch_decode(parsed.a, stream);
      },
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("kv_layout"), py::arg("page_size"),
      py::arg("indptr"), py::arg("indices"), py::arg("last_page_len"), py::arg("kv_len_scalar"), py::arg("out"),
      py::arg("lse"), py::arg("partial_out"), py::arg("partial_lse"), py::arg("work"), py::arg("split_counts"),
      py::arg("arrivals"), py::arg("chunk_pages"), py::arg("max_splits"),
      py::arg("q_len_per_req"), py::arg("sm_scale"), py::arg("logits_soft_cap"), py::arg("window_left"),
      py::arg("pos_encoding_mode"), py::arg("rope_scale"), py::arg("rope_theta"), py::arg("alibi_slopes"),
      py::arg("k_scale"), py::arg("v_scale"), py::arg("sinks"), py::arg("stream"));

  // A batch_decode call checked once (decode_launchers.h): launch() takes plain integers, so
  // an eager run() pays neither the view parsing nor the checks. Positional arguments only:
  // pybind11's keyword matching is host time on every call.
  py::class_<PreparedDecodeHandle>(m, "PreparedDecode")
      .def("launch", [](const PreparedDecodeHandle& h, std::uintptr_t q, std::int64_t q_stride_row,
                        std::int64_t q_stride_head, std::uintptr_t k, std::uintptr_t v, std::int64_t num_pages,
                        std::uintptr_t out, std::uintptr_t lse, std::uintptr_t stream) {
        const DecodeCall call{q, q_stride_row, q_stride_head, k, v, num_pages, out, lse};
        py::gil_scoped_release release;
        launch_prepared_decode(*h.prepared, call, stream);
      })
      .def("launch_with", [](const PreparedDecodeHandle& h, std::uintptr_t q, std::int64_t q_stride_row,
                             std::int64_t q_stride_head, std::uintptr_t k, std::uintptr_t v, std::int64_t num_pages,
                             std::uintptr_t out, std::uintptr_t lse, float sm_scale, float k_scale, float v_scale,
                             std::int64_t window_left, std::uintptr_t sinks, std::uintptr_t stream) {
        const DecodeCall call{q,    q_stride_row, q_stride_head, k,       v,           num_pages, out,
                              lse,  true,         sm_scale,      k_scale, v_scale, window_left, sinks};
        py::gil_scoped_release release;
        launch_prepared_decode(*h.prepared, call, stream);
      });
  m.def(
      "prepare_batch_decode",
      [](py::handle q, py::handle k_cache, py::handle v_cache, int kv_layout, std::int64_t page_size,
         py::handle indptr, py::handle indices, py::handle last_page_len, std::int64_t kv_len_scalar, py::handle out,
         py::handle lse, py::handle partial_out, py::handle partial_lse, py::handle work, py::handle split_counts,
         py::handle arrivals, std::int64_t chunk_pages, std::int64_t max_splits, std::int64_t q_len_per_req,
         float sm_scale, float logits_soft_cap, std::int64_t window_left, int pos_encoding_mode, float rope_scale,
         float rope_theta, py::handle alibi_slopes, float k_scale, float v_scale, py::handle sinks) {
        const ParsedDecode parsed(q, k_cache, v_cache, kv_layout, page_size, indptr, indices, last_page_len,
                                  kv_len_scalar, out, lse, partial_out, partial_lse, work, split_counts, arrivals,
                                  chunk_pages, max_splits, q_len_per_req, sm_scale, logits_soft_cap, window_left,
                                  pos_encoding_mode, rope_scale, rope_theta, alibi_slopes, k_scale, v_scale, sinks);
        return PreparedDecodeHandle{prepare_batch_decode(parsed.a)};
      });

  m.def(
      "merge_states",
      [](py::handle v, py::handle s, py::handle v_out, py::handle s_out, std::uintptr_t stream) {
        const TensorView vv = view_from_py(v), sv = view_from_py(s), ov = view_from_py(v_out);
        const auto so = optional_view_from_py(s_out);
        py::gil_scoped_release release;
        launch_merge_states(vv, sv, ov, opt(so), stream);
      },
      py::arg("v"), py::arg("s"), py::arg("v_out"), py::arg("s_out"), py::arg("stream"));

  m.def(
      "merge_state_in_place",
      [](py::handle v, py::handle s, py::handle v_other, py::handle s_other, py::handle mask, std::uintptr_t stream) {
        const TensorView vv = view_from_py(v), sv = view_from_py(s), vo = view_from_py(v_other),
                         so = view_from_py(s_other);
        const auto mk = optional_view_from_py(mask);
        py::gil_scoped_release release;
        launch_merge_state_in_place(vv, sv, vo, so, opt(mk), stream);
      },
      py::arg("v"), py::arg("s"), py::arg("v_other"), py::arg("s_other"), py::arg("mask"), py::arg("stream"));

  m.def(
      "append_paged_kv_cache",
      [](py::handle key, py::handle value, py::handle batch_indices, py::handle positions, py::handle k_cache,
         py::handle v_cache, int kv_layout, std::int64_t page_size, py::handle indices, py::handle indptr,
         std::uintptr_t stream) {
        if (kv_layout != 0 && kv_layout != 1) throw py::value_error("kv_layout must be 0 (NHD) or 1 (HND)");
        const TensorView a = view_from_py(key), b = view_from_py(value), bi = view_from_py(batch_indices),
                         ps = view_from_py(positions), kc = view_from_py(k_cache), vc = view_from_py(v_cache),
                         ix = view_from_py(indices), ip = view_from_py(indptr);
        py::gil_scoped_release release;
        launch_append_paged_kv_cache(a, b, bi, ps, kc, vc, static_cast<KvLayout>(kv_layout), page_size, ix, ip,
                                     stream);
      },
      py::arg("append_key"), py::arg("append_value"), py::arg("batch_indices"), py::arg("positions"),
      py::arg("k_cache"), py::arg("v_cache"), py::arg("kv_layout"), py::arg("page_size"), py::arg("indices"),
      py::arg("indptr"), py::arg("stream"));
}

}  // namespace aotinfer::attention
