// What both decode kernels (CUDA-core decode_kernel.cuh, tensor-core decode_tc_kernel.cuh)
// share: the parameter block, the 16-byte cp.async copy, the key range one CTA owns, and the
// finishing of one output row (normalisation, sinks, LSE, or a split's partial state).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/pdl.cuh"
#include "kv_types.cuh"
#include "merge.cuh"

namespace aotinfer::attention {

constexpr int kRowBlock = 16;  // query rows per CTA (GQA group x q_len_per_req, blocked); MMA M
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kClustersIfResident = 2;  // DecodeParams::cluster_merge: clusters if they all fit

// A logit under the soft cap, cap * tanh(x / cap), written as cap - 2 cap / (2^(x k) + 1)
// with k = 2 log2(e) / cap (soft_cap_k, once a CTA): one exp2 and one fast division, where
// tanhf and an IEEE division took dozens of instructions and branches per score. The d256
// tensor-core kernel runs one warp per scheduler, so nothing hides them: Gemma-2's shape
// (16/8 heads, d256, cap 50) ran at 0.69-0.88x FlashInfer (history/decode-configs-47b22c8-
// h100.md), 0.87-1.00x after. Absolute error about 2 cap x 2^-22 (2.4e-5 at cap 50: a
// logit's weight moves by 2.4e-5 relative, far below the bf16 output's 2^-9); +-inf give
// +-cap (the division of an infinite 2^(x k) + 1 is 0), NaN stays NaN.
__host__ __device__ inline float soft_cap_k(float cap) { return cap > 0.f ? 2.f * kLog2e / cap : 0.f; }
__device__ __forceinline__ float soft_capped(float x, float cap, float k) {
  return cap - __fdividef(2.f * cap, exp2f(x * k) + 1.f);
}

// QT / KVT: q's and the cache's element types. The launcher fills DecodeParams<void, void>
// (the same members with untyped q, k, v and out), and decode_dispatch.cuh turns it into the
// typed block of one kernel instantiation.
template <typename QT, typename KVT>
struct DecodeParams {
  const QT* q;
  std::int64_t q_stride_row, q_stride_head;
  const KVT* k;
  const KVT* v;
  std::int64_t k_stride_page, k_stride_slot, k_stride_head;
  std::int64_t v_stride_page, v_stride_slot, v_stride_head;
  const std::int32_t* indptr;  // nullptr: one request, kv_len = kv_len_scalar, page 0
  const std::int32_t* indices;
  const std::int32_t* last_page_len;
  std::int64_t page_size, kv_len_scalar;
  std::int64_t num_pages;  // page ids are clamped into [0, num_pages): a bad table cannot read outside the cache
  QT* out;
  std::int64_t out_stride_row, out_stride_head;
  float* lse;  // (rows, Hq) contiguous or nullptr
  float* partial_out;  // (rows, splits, Hq, D) contiguous, when splits > 1
  float* partial_lse;  // (rows, splits, Hq)
  // The planner's work list (cta_work reads it: work_entries entries per heads x row-blocks
  // CTAs, in launch order, which each CTA runs one after another), or nullptr: then the grid
  // is requests x heads x splits and split s covers pages [s * chunk_pages, (s + 1) *
  // chunk_pages).
  const std::int32_t* work;
  int work_entries;  // 1 without a work list
  const std::int32_t* split_counts;  // with a work list: pieces of each request
  // Split-KV without a merge kernel: per (request, row block, KV head) the number of its
  // splits that have finished; the last one merges them (merge_if_last_split) and resets it
  // to 0. nullptr: a merge kernel follows.
  std::int32_t* arrivals;
  std::int64_t chunk_pages, splits, q_len, num_qo_heads, num_kv_heads, group;
  float sm_scale;  // includes q_scale and k_scale
  float soft_cap;  // 0: off
  std::int64_t window_left;  // < 0: off
  int pos_encoding;  // 0 none, 1 rope llama, 2 alibi
  float rope_log2_theta, rope_inv_scale;
  const float* alibi_slopes;
  float v_scale;
  const float* sinks;
  int stages;  // tensor-core kernel: per-warp pipeline depth (2..4), chosen by the launcher
  // Tensor-core kernel, a split grid plan without a work list (sm_90+): the grid runs in
  // clusters of the splits, which merge through distributed shared memory
  // (cluster_merge.cuh); partial_out, partial_lse and arrivals are then unused. The host
  // sets kClustersIfResident; the launcher turns it into 1 where every cluster of the grid
  // is resident at once and 0 where not (the in-grid merge, or the merge kernel after a
  // grid without arrivals), before the launch.
  int cluster_merge;
};

namespace detail {

// 16-byte global -> shared copy; asynchronous (cp.async) on sm_80+, a plain load and store
// on sm_75, where the next tile's loads then overlap less but the result is the same.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}
// 4-byte global -> shared copy (a page id), asynchronous on sm_80+.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem));
#else
  *static_cast<int*>(smem) = *static_cast<const int*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// A global load the compiler must issue where it stands: a plain load used on one side of a
// branch is sunk into that branch, after the loads the branch waits for.
__device__ __forceinline__ std::int32_t load_now(const std::int32_t* at) {
  std::int32_t v;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(at));
  return v;
}

// Key index -> page index: a shift where the page size is a power of two, else a 32-bit
// division when the index fits (always, in practice); a 64-bit division costs ~70
// instructions, more than the rest of a tile's copy bookkeeping.
struct PageMath {
  std::int64_t size;
  bool pow2;
  int shift;
  __device__ __forceinline__ std::int64_t page(std::int64_t j) const {
    if (pow2) return j >> shift;
    if (j < (1ll << 31) && size < (1ll << 31))
      return static_cast<std::uint32_t>(j) / static_cast<std::uint32_t>(size);
    return j / size;
  }
};

// A page id from the page table, clamped into the cache: a bad table entry reads a wrong page
// of the cache, never outside it.
__device__ __forceinline__ std::int64_t clamp_page(std::int64_t id, std::int64_t num_pages) {
  return id < 0 ? 0 : (id >= num_pages ? num_pages - 1 : id);
}

__device__ __forceinline__ PageMath page_math(std::int64_t page_size) {
  const bool pow2 = page_size > 0 && page_size < (1ll << 31) && (page_size & (page_size - 1)) == 0;
  return PageMath{page_size, pow2, pow2 ? __ffsll(page_size) - 1 : 0};
}

}  // namespace detail

// Programmatic dependent launch (sm_90+, launched so by the host): wait for the previous
// kernel in the stream before the first global read (it may have written q, the page table
// or the cache), then let the next kernel (the split-KV merge) launch at once: its CTAs take
// free slots as this grid's last CTAs run and wait in griddepcontrol.wait for our results,
// so the merge's launch latency is hidden. Both are no-ops without the launch attribute.
__device__ __forceinline__ void decode_pdl_prologue() {
  pdl_wait_for_prior_grid();
  pdl_launch_dependents();
}

// What one CTA of the decode grid works on: request b, KV head, its split's partial slot
// (-1: the request is not split and the CTA writes the output itself), the request's pages
// [page_lo, page_hi) (page_hi -1: to the end), and its block of query rows [row0, row0 + rows)
// among the request's q_len * group rows.
struct CtaWork {
  std::int64_t b, kv_head, split, page_lo, page_hi;
  int row0, rows;
};

template <typename QT, typename KVT>
__device__ __forceinline__ CtaWork cta_work(const DecodeParams<QT, KVT>& p, int entry) {
  // blockIdx.x = kv_head + num_kv_heads * (row_block + row_blocks * item): the KV heads of one
  // request are launched together and stream the same pages at about the same time. In the
  // NHD layout one token's row of a page holds every head (8 heads x 256 B at d128), so the
  // heads read neighbouring bytes of DRAM together instead of one head of every request
  // per wave. Without a work list the item is the request and blockIdx.z its split.
  CtaWork w;
  const std::int64_t rows_total = p.q_len * p.group;
  const std::int64_t heads_blocks = p.num_kv_heads * ((rows_total + kRowBlock - 1) / kRowBlock);
  const std::int64_t item = blockIdx.x / heads_blocks;
  const std::int64_t hb = blockIdx.x % heads_blocks;
  if (p.work) {
    // A work-list entry is four int32: b, partial slot, page_lo, page_hi (one 16-byte load);
    // b < 0 pads a CTA's run of entries.
    const int4 it = reinterpret_cast<const int4*>(p.work)[item * p.work_entries + entry];
    w.b = it.x;
    w.split = it.y;
    w.page_lo = it.z;
    w.page_hi = it.w;
  } else {
    w.b = item;
    w.split = blockIdx.z;
    w.page_lo = p.splits > 1 ? w.split * p.chunk_pages : 0;
    w.page_hi = p.splits > 1 ? w.page_lo + p.chunk_pages : -1;  // -1: to the end
  }
  w.kv_head = hb % p.num_kv_heads;
  const std::int64_t row_block = hb / p.num_kv_heads;
  w.row0 = static_cast<int>(row_block * kRowBlock);
  w.rows = static_cast<int>(rows_total - w.row0 < kRowBlock ? rows_total - w.row0 : kRowBlock);
  return w;
}

// Runs piece(work) for each of this CTA's work entries, in order (one without a work list).
// The first entry is read before the wait on the previous grid: the work list is plan()'s
// copy, never a kernel's output, so the dependent loads after the wait start one round trip
// sooner. Between entries a barrier frees the shared memory the last one used (q, page ids,
// the merge buffer). A run of entries lets a CTA take the end of one request and the start
// of the next, so a skewed batch's CTAs can get equal work in one wave (_decode_plan.py).
template <typename QT, typename KVT, typename Piece>
__device__ __forceinline__ void for_each_work_entry(const DecodeParams<QT, KVT>& p, Piece&& piece) {
  CtaWork work = cta_work(p, 0);
  decode_pdl_prologue();
  for (int e = 0;;) {
    piece(work);
    if (++e >= p.work_entries) return;
    work = cta_work(p, e);
    if (work.b < 0) return;
    __syncthreads();
  }
}

// The keys one CTA attends to: request b's keys [k_begin, k_end) of its split, the window
// applied for its first query row.
struct KeyRange {
  std::int64_t kv_len, page_begin, k_begin, k_end;
};

template <typename QT, typename KVT>
__device__ __forceinline__ KeyRange key_range(const DecodeParams<QT, KVT>& p, const CtaWork& w) {
  KeyRange r{0, 0, 0, 0};
  const int row0 = w.row0;
  if (p.indptr) {
    // The three loads are issued together (last_page_len unconditionally: it has an entry
    // for every request), so the page table costs one round trip, not two.
    r.page_begin = p.indptr[w.b];
    const std::int64_t pages = p.indptr[w.b + 1] - r.page_begin;
    const std::int64_t last = detail::load_now(p.last_page_len + w.b);
    r.kv_len = pages > 0 ? (pages - 1) * p.page_size + last : 0;
    if (r.kv_len > pages * p.page_size) r.kv_len = pages * p.page_size;  // last_page_len too large
    if (r.kv_len < 0) r.kv_len = 0;
  } else {
    r.kv_len = p.kv_len_scalar;
  }
  r.k_begin = w.page_lo * p.page_size;
  r.k_end = w.page_hi >= 0 && w.page_hi * p.page_size < r.kv_len ? w.page_hi * p.page_size : r.kv_len;
  // Query row r (local) is query qi = (row0 + r) / group of head kv_head*group + (row0+r) % group,
  // at position kv_len - q_len + qi. The window lets whole tiles before the earliest visible key go.
  const std::int64_t first_pos = r.kv_len - p.q_len + (row0 / p.group);
  if (p.window_left >= 0) {
    const std::int64_t first_visible = first_pos - p.window_left;
    if (r.k_begin < first_visible) r.k_begin = first_visible;
  }
  if (r.k_begin < 0) r.k_begin = 0;
  return r;
}

// Where and how one query row's result goes, given its running max m (base 2) and sum l:
// `partial` set (a split request): this split's normalised partial row (float) and its LSE;
// otherwise the final row in q's dtype, scaled by v_scale / (l + sink term), and the base-2 LSE.
template <typename QT>
struct RowOut {
  float scale, lse;
  float* partial;
  QT* out;
  float* lse_at;  // nullptr: no LSE wanted
};

template <typename QT, typename KVT>
__device__ __forceinline__ RowOut<QT> row_out(const DecodeParams<QT, KVT>& p, std::int64_t b, std::int64_t split,
                                              std::int64_t kv_head, std::int64_t gr, int head_dim, float m,
                                              float l) {
  const std::int64_t qi = gr / p.group, head = kv_head * p.group + gr % p.group;
  const std::int64_t row = b * p.q_len + qi;
  RowOut<QT> o{};
  if (p.splits > 1 && split >= 0) {
    const std::int64_t at = (row * p.splits + split) * p.num_qo_heads + head;
    o.scale = l > 0.f ? 1.f / l : 0.f;
    o.lse = row_lse(m, l);
    o.partial = p.partial_out + at * head_dim;
    o.lse_at = p.partial_lse + at;
    return o;
  }
  // The final row: the sink term, v_scale and the LSE rule are the split merges' (merged_row).
  const MergedRow mr = merged_row(m, l, p.sinks, head, p.v_scale);
  o.scale = mr.inv;
  o.lse = mr.lse;
  o.out = p.out + row * p.out_stride_row + head * p.out_stride_head;
  o.lse_at = p.lse ? p.lse + row * p.num_qo_heads + head : nullptr;
  return o;
}

// The end of a split request's merge (in the grid, or in a cluster): columns c..c+V-1 of
// the CTA's query row r from the merged state st, scaled by v_scale / (denominator + sink),
// and the row's LSE once (c == 0).
template <int V, typename QT, typename KVT>
__device__ __forceinline__ void store_merged(const DecodeParams<QT, KVT>& p, const CtaWork& w, int r, int c,
                                             const MergeAccum<V>& st) {
  const std::int64_t gr = w.row0 + r, qi = gr / p.group, head = w.kv_head * p.group + gr % p.group;
  const std::int64_t row = w.b * p.q_len + qi;
  const MergedRow mr = merged_row(st.m, st.l, p.sinks, head, p.v_scale);
  QT* out = p.out + row * p.out_stride_row + head * p.out_stride_head + c;
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = from_f32<QT>(st.acc[i] * mr.inv);
  if (p.lse && c == 0) p.lse[row * p.num_qo_heads + head] = mr.lse;
}

}  // namespace aotinfer::attention
