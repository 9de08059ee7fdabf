// Host entry points of the decode-attention family, on framework-free views. The binding
// file (pybind11) includes only this header. Python-side signature (the contract with
// core/aotinfer/decode.py):
//
//   kernels.batch_decode(q, k_cache, v_cache, kv_layout, page_size, indptr|None, indices|None,
//       last_page_len|None, kv_len_scalar, out, lse|None, partial_out|None, partial_lse|None,
//       work|None, split_counts|None, arrivals|None, chunk_pages, max_splits, q_len_per_req, sm_scale, logits_soft_cap, window_left,
//       pos_encoding_mode, rope_scale, rope_theta, alibi_slopes|None, k_scale, v_scale,
//       sinks|None, stream)
//
//   kernels.prepare_batch_decode(<batch_decode's arguments but the stream>) -> PreparedDecode
//   PreparedDecode.launch(q_ptr, q_stride_row, q_stride_head, k_ptr, v_ptr, num_pages, out_ptr,
//       lse_ptr|0, stream)                   # = batch_decode with these pointers in the views
//   PreparedDecode.launch_with(<launch's arguments but the stream>, sm_scale, k_scale, v_scale,
//       window_left, sinks_ptr|0, stream)    # ... and these scalars and sinks
//
//   kernels.merge_states(v (N, S, H, D), s (N, S, H) float32, v_out (N, H, D), s_out (N, H)|None,
//       stream)                                            # S states merged per (n, h)
//   kernels.merge_state_in_place(v (N, H, D), s (N, H), v_other, s_other, mask (N,) bool|None,
//       stream)
//   kernels.append_paged_kv_cache(append_key (nnz, Hkv, D), append_value, batch_indices (nnz,)
//       int32, positions (nnz,) int32, k_cache, v_cache, kv_layout, page_size, indices (int32),
//       indptr (B+1) int32, stream)
//
// Shapes and meaning (B requests, Hq query heads, Hkv KV heads, D head dim):
// - q: (B * q_len_per_req, Hq, D) float16/bfloat16, last dim contiguous, other strides free
//   (a slice of a fused QKV projection is fine). Row r of request b is b*q_len_per_req + r.
// - k_cache / v_cache: 4-D, (pages, page_size, Hkv, D) for kv_layout 0 (NHD) or
//   (pages, Hkv, page_size, D) for 1 (HND); last dim contiguous, other strides free (the two
//   halves of a 5-D cache are views of it). dtype: q's dtype, float8_e4m3fn or float8_e5m2.
// - indptr (B+1), indices (indptr[B]), last_page_len (B): int32 CSR page table. With indptr
//   None there is one request whose keys are k_cache[0] rows 0 .. kv_len_scalar-1 (single
//   decode over contiguous K/V: pages=1, page_size=kv_len); split-KV then cuts the keys
//   into chunks of chunk_pages keys (no page table to read, no page ids on the path).
// - Request b has kv_len_b = page_size * (pages_b - 1) + last_page_len[b] keys; its query
//   row r sits at position kv_len_b - q_len_per_req + r and sees key j iff
//   j <= that position (bottom-right causal) and, with window_left >= 0,
//   position - j <= window_left.
// - logits s = (q . k) * sm_scale * k_scale; with logits_soft_cap > 0, s = cap * tanh(s / cap);
//   ALiBi adds slope_h * (j - position); ROPE_LLAMA rotates q and k (non-interleaved halves,
//   inv_freq = 1 / (rope_scale * rope_theta^(2i/D)), k at its key index, q at its position).
// - sinks (Hq) float32: one extra logit per head in the softmax denominator (no value).
// - out (B * q_len_per_req, Hq, D) q's dtype = v_scale * softmax(s) . v; lse (same rows, Hq)
//   float32 = log2 of the denominator (base 2, sinks included).
// - Split-KV: with max_splits > 1, request b's pages are cut into chunks of chunk_pages
//   pages; split s of request b handles chunk s (if it exists) and writes its partial output
//   and lse to partial_out (B*q_len, max_splits, Hq, D) float32 / partial_lse (B*q_len,
//   max_splits, Hq) float32 (lse -inf for an empty chunk), and a merge kernel combines them.
//   The core's planner picks chunk_pages and max_splits (from the workspace) so the grid
//   fills the GPU; the grid depends on them only, so a captured graph can be replayed with
//   new page tables of the same batch size (CUDA-graph mode of the wrapper).
// - Work list (the wrapper's other plans): work (items, 4) int32 holds, in launch order,
//   (request b, partial slot s or -1, first page, end page) for the pages [first, end) of
//   request b; the grid is items x Hkv x query-row blocks. Slot -1 (a request that is not
//   split) writes out and lse directly; slot s >= 0 writes partial slot s, and request b's
//   split_counts[b] (B) int32 slots are merged. The plan made both, so they are trusted:
//   every request appears, slots are below max_splits, pages lie in the request's table.
//   chunk_pages is then the largest item's page count (it sets the pipeline depth only).
//   A work list needs arrivals. work may also be (items, entries, 4): each CTA group then
//   runs its item's entries one after another (an entry with request -1 ends the run), so
//   one CTA can take the end of a request and the start of the next.
// - arrivals: int32, at least B x ceil(q_len_per_req * Hq / Hkv / 16) x Hkv entries, all 0
//   before the first call: the merge is done by the last split of each (request, row block,
//   KV head) to finish, which leaves its counter at 0 again (last_split_merge.cuh); no merge
//   kernel is launched. Without arrivals (and without a work list) a merge kernel follows.
// - A request split into 2..8 pieces without a work list, on sm_90+ with the tensor-core
//   kernel, where B = 1 or every cluster of the grid is resident at once: the splits run as
//   one thread-block cluster per (request, row block, KV head) and merge through distributed
//   shared memory (cluster_merge.cuh); no merge kernel, and partial_out, partial_lse and
//   arrivals are left untouched (still required as above).
//   AOTINFER_DECODE_CLUSTER_MERGE=off turns this off.
#pragma once

#include <cstdint>
#include <memory>

#include "../common/tensor_view.h"

namespace aotinfer::attention {

enum class PosEncoding : int { kNone = 0, kRopeLlama = 1, kAlibi = 2 };
enum class KvLayout : int { kNHD = 0, kHND = 1 };

struct DecodeArgs {
  const TensorView* q;
  const TensorView* k_cache;
  const TensorView* v_cache;
  KvLayout layout;
  std::int64_t page_size;
  const TensorView* indptr;         // nullptr: single request
  const TensorView* indices;
  const TensorView* last_page_len;
  std::int64_t kv_len_scalar;
  const TensorView* out;
  const TensorView* lse;            // nullptr: not wanted
  const TensorView* partial_out;    // nullptr when max_splits == 1
  const TensorView* partial_lse;
  const TensorView* work;           // (items, 4) int32 work list or nullptr (see above)
  const TensorView* split_counts;   // (B) int32 with a work list
  const TensorView* arrivals;       // int32 counters (see above) or nullptr: a merge kernel
  std::int64_t chunk_pages;
  std::int64_t max_splits;
  std::int64_t q_len_per_req;
  float sm_scale;
  float logits_soft_cap;
  std::int64_t window_left;
  PosEncoding pos_encoding;
  float rope_scale;
  float rope_theta;
  const TensorView* alibi_slopes;   // (Hq) float32 or nullptr
  float k_scale;
  float v_scale;
  const TensorView* sinks;          // (Hq) float32 or nullptr
};

void launch_batch_decode(const DecodeArgs& args, std::uintptr_t stream);

// A batch_decode call checked once: what its views and options fix (every check of
// launch_batch_decode, the grid, the kernel parameters but the per-call pointers). A
// wrapper's first run() after plan() prepares one (the cache's strides are known only then);
// each run() then passes only the pointers (and q's strides, the cache's page count), which
// spares the view parsing and the checks on the host time of every eager run(). The environment switches are still read per launch, as for
// batch_decode, and the outcome is that of batch_decode on the same views.
struct PreparedDecode;

// The per-call part of a prepared launch: q's pointer and row/head strides (q may be a slice
// of a fused projection), the K and V halves' pointers and the cache's page count (the
// other strides are the prepared ones), out's pointer and lse's (0: not written). With
// per_call, the call's scales, window and sinks replace the prepared ones (a run() with
// k_scale / v_scale / q_scale / window_left or sinks: fp8 caches and sink models pass them on
// every call); the caller has checked them (sinks: (Hq) float32, contiguous, on the device).
struct DecodeCall {
  std::uintptr_t q;
  std::int64_t q_stride_row;
  std::int64_t q_stride_head;
  std::uintptr_t k;
  std::uintptr_t v;
  std::int64_t num_pages;
  std::uintptr_t out;
  std::uintptr_t lse;
  bool per_call = false;
  float sm_scale = 1.f;  // as DecodeArgs::sm_scale (k_scale apart)
  float k_scale = 1.f;
  float v_scale = 1.f;
  std::int64_t window_left = -1;
  std::uintptr_t sinks = 0;  // 0: none
};

// args' q, k_cache, v_cache, out and lse give shapes, strides, dtypes and the device; their
// pointers are not kept (lse: its shape is checked; whether a call writes it is per call).
std::shared_ptr<const PreparedDecode> prepare_batch_decode(const DecodeArgs& args);

void launch_prepared_decode(const PreparedDecode& prepared, const DecodeCall& call, std::uintptr_t stream);

void launch_merge_states(const TensorView& v, const TensorView& s, const TensorView& v_out,
                         const TensorView* s_out, std::uintptr_t stream);

void launch_merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                                 const TensorView& s_other, const TensorView* mask, std::uintptr_t stream);

void launch_append_paged_kv_cache(const TensorView& append_key, const TensorView& append_value,
                                  const TensorView& batch_indices, const TensorView& positions,
                                  const TensorView& k_cache, const TensorView& v_cache, KvLayout layout,
                                  std::int64_t page_size, const TensorView& indices,
                                  const TensorView& indptr, std::uintptr_t stream);

}  // namespace aotinfer::attention
