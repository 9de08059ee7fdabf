// Host launchers of the decode family: defensive checks on the views, the grid, and the
// split-KV merge. See decode_launchers.h for the contract.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <string>

#include "../common/device_guard.h"
#include "../common/env_switch.h"
#include "../common/launch_cache.h"
#include "../common/status.h"
#include "../common/view_checks.h"
#include "append_kv.cuh"
#include "decode_dispatch.cuh"
#include "decode_launchers.h"
#include "merge.cuh"

namespace aotinfer::attention {
namespace {

constexpr const char* kOp = "batch_decode";

// A check whose message is built only when it fails: as a function taking std::string, every
// check allocated its message (and concatenated numbers into it) on every call, and a decode
// call makes about fifty checks on the host-time budget of an eager run().
#define REQUIRE(ok, message)             \
  do {                                   \
    if (!(ok)) fail_argument(message);   \
  } while (0)

void check_int32_vector(const TensorView* v, const TensorView& ref, const char* name) {
  if (!v) return;
  check_rank(*v, 1, kOp, name);
  check_dtype(*v, DType::kInt32, kOp, name);
  check_same_device(*v, ref, kOp, name);
  REQUIRE(v->size(0) <= 1 || v->stride(0) == 1, std::string(kOp) + ": " + name + " must be contiguous");
}

bool is_half(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

// Pipeline depth of the tensor-core kernel: the preferred depth per head dim (tiles in flight
// per warp; two CTAs per H100/H200 SM at D = 128 either way), lowered until the block fits
// `smem_limit`; 0 when even two stages do not fit. At D = 128, a launch whose longest CTA
// streams at least kLongStreamKeys keys takes 2 stages, shorter ones 3. Measured on an H200
// (dev/NOTES.md items 20 and 40): 2 vs 3 stages 255-258 vs 263 us at 16 x 16384 (8192 keys
// per CTA) and 985-992 vs 1001-1035 at 64 x 16384, but 286 vs 277-283 at 256 x 1024 (1024
// keys per CTA) and 10.3 vs 10.1 at batch 1. A threshold of 4096 was tried and reverted
// (history/decode-a03e786-stages-from-4096-reverted.md): 64 x 4096 uniform gained 0.3%, but
// skewed batches, whose many short pieces share the launch with one long one, lost 1.2-1.4%
// (64 x 16384 and 256 x 4096 skewed).
constexpr std::int64_t kLongStreamKeys = 8192;
int tensor_core_stages(std::int64_t d, int smem_limit, std::int64_t keys_per_cta, int kv_size) {
  int stages = d == 64 ? kTcMaxStages : (d == 128 && keys_per_cta >= kLongStreamKeys ? 2 : 3);
  // AOTINFER_DECODE_STAGES=2..4 overrides the preference (dev/sweep_decode.py tunes with it).
  if (const char* env = std::getenv("AOTINFER_DECODE_STAGES")) {
    const int want = std::atoi(env);
    REQUIRE(want >= 2 && want <= kTcMaxStages,
            std::string("AOTINFER_DECODE_STAGES must be 2..4, got '") + env + "'");
    stages = want;
  }
  while (stages >= 2 && tc_smem_bytes(static_cast<int>(d), stages, kv_size) > static_cast<std::size_t>(smem_limit))
    --stages;
  return stages >= 2 ? stages : 0;
}

// The tensor-core kernel serves sm_80+ with KV in q's dtype or fp8 and no in-kernel RoPE; the
// CUDA-core kernel everything else (ROPE_LLAMA, sm_75). AOTINFER_DECODE_KERNEL=
// cuda_cores|tensor_cores pins one where both apply (tests and benchmarks cover both).
bool use_tensor_core_kernel(int cc_major, int stages, bool kv_dtype_ok, PosEncoding pos) {
  if (cc_major < 8 || stages < 2 || !kv_dtype_ok || pos == PosEncoding::kRopeLlama) return false;
  return env_choice("AOTINFER_DECODE_KERNEL", {"cuda_cores", "tensor_cores", "auto"}) != "cuda_cores";
}

// Whether a split decode merges its splits inside thread-block clusters (cluster_merge.cuh),
// as DecodeParams::cluster_merge: the tensor-core kernel on sm_90+, a grid plan (no work
// list) of 2..kMaxClusterSplits splits (one request: batch 1 x 1024 at d128, 8 splits, 8.8
// -> 8.1 us; uniform batches, which the core gives a grid plan for: _decode_plan.
// uniform_grid), and only where every cluster of the grid is resident at once
// (kClustersIfResident: the launcher asks cudaOccupancyMaxActiveClusters). Why resident: a
// cluster's CTAs share one GPC and wait for each other at its end, so a grid of clusters
// that overflows the GPCs' slots runs a second round (H100, 256 CTAs in clusters of 8: 1.25x
// slower than the in-grid merge; one request at Gemma-7B's 16/16 heads, d256, 1 x 1024 in 7
// splits: 112 CTAs in clusters of 7 where 105 fit, 22.8 us against 14.4 in 6 splits), and
// the empty splits of a CUDA-graph plan would hold their slots while later CTAs wait. Where
// they do not fit, the grid merges in itself (`arrivals`) or the merge kernel follows.
// AOTINFER_DECODE_CLUSTER_MERGE=off|on (default on) pins it off for tests and A/B runs.
int use_cluster_merge(int cc_major, bool tensor_cores, std::int64_t splits, bool work_list) {
  if (cc_major < 9 || !tensor_cores || work_list || splits < 2 || splits > kMaxClusterSplits) return 0;
  if (!env_switch_on("AOTINFER_DECODE_CLUSTER_MERGE")) return 0;
  return kClustersIfResident;
}

template <typename TIn, typename TOut>
cudaError_t run_merge(const TensorView& v, const TensorView& s, const TensorView& v_out, const TensorView* s_out,
                      const float* sinks, float v_scale, bool pdl, cudaStream_t stream) {
  MergeParams<TIn, TOut> p;
  p.v = v.ptr<const TIn>();
  p.v_stride_n = v.stride(0);
  p.v_stride_s = v.stride(1);
  p.v_stride_h = v.stride(2);
  p.s = s.ptr<const float>();
  p.s_stride_n = s.stride(0);
  p.s_stride_s = s.stride(1);
  p.s_stride_h = s.stride(2);
  p.v_out = v_out.ptr<TOut>();
  p.o_stride_n = v_out.stride(0);
  p.o_stride_h = v_out.stride(1);
  p.s_out = s_out ? s_out->ptr<float>() : nullptr;
  p.n = v.size(0);
  p.num_states = v.size(1);
  p.heads = v.size(2);
  p.dim = v.size(3);
  p.sinks = sinks;
  p.v_scale = v_scale;
  if (p.n == 0 || p.heads == 0) return cudaSuccess;
  // Four columns per lane (one vector load) when every state's row starts 4-aligned.
  const bool vec4 = p.dim % 4 == 0 && p.v_stride_n % 4 == 0 && p.v_stride_s % 4 == 0 && p.v_stride_h % 4 == 0 &&
                    v.data % (4 * sizeof(TIn)) == 0;
  return launch_with_pdl(vec4 ? merge_states_kernel<TIn, TOut, 4> : merge_states_kernel<TIn, TOut, 1>,
                         dim3(static_cast<unsigned>(p.n), static_cast<unsigned>(p.heads)), dim3(kMergeThreads), 0,
                         stream, pdl, p);
}

template <typename TOut>
cudaError_t run_merge_in(DType in, const TensorView& v, const TensorView& s, const TensorView& v_out,
                         const TensorView* s_out, const float* sinks, float v_scale, bool pdl, cudaStream_t stream) {
  switch (in) {
    case DType::kFloat32: return run_merge<float, TOut>(v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    case DType::kFloat16: return run_merge<__half, TOut>(v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    case DType::kBFloat16: return run_merge<__nv_bfloat16, TOut>(v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    default: fail_argument("merge_states: v must be float32, float16 or bfloat16");
  }
}

// pdl: the merge follows a split decode launched with PDL (sm_90+) and may launch early.
cudaError_t merge_dispatch(const TensorView& v, const TensorView& s, const TensorView& v_out, const TensorView* s_out,
                           const float* sinks, float v_scale, bool pdl, cudaStream_t stream) {
  switch (v_out.dtype) {
    case DType::kFloat32: return run_merge_in<float>(v.dtype, v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    case DType::kFloat16: return run_merge_in<__half>(v.dtype, v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    case DType::kBFloat16:
      return run_merge_in<__nv_bfloat16>(v.dtype, v, s, v_out, s_out, sinks, v_scale, pdl, stream);
    default: fail_argument("merge_states: v_out must be float32, float16 or bfloat16");
  }
}

}  // namespace

struct PreparedDecode {
  RawDecode r{};  // q, k, v, num_pages, out, lse, stages and cluster_merge are set per launch
  DType q_dtype = DType::kFloat16;
  DType kv_dtype = DType::kFloat16;
  std::int64_t head_dim = 0;
  std::int64_t batch = 0;
  std::int64_t rows = 0;
  std::int64_t num_qo_heads = 0;
  std::int64_t splits = 1;
  std::int64_t keys_per_cta = 0;   // the most keys one CTA streams (sets the pipeline depth)
  std::size_t cuda_core_smem = 0;  // the CUDA-core kernel's shared memory per block
  int smem_limit = 0;
  int cc_major = 0;
  bool work_list = false;
  bool arrivals = false;
  dim3 grid;
  TensorView out;  // out's shape, strides, dtype and device; its pointer is per launch
};

std::shared_ptr<const PreparedDecode> prepare_batch_decode(const DecodeArgs& a) {
  const TensorView& q = *a.q;
  const TensorView& k = *a.k_cache;
  const TensorView& v = *a.v_cache;
  check_rank(q, 3, kOp, "q");
  check_rank(k, 4, kOp, "k_cache");
  check_rank(v, 4, kOp, "v_cache");
  REQUIRE(is_half(q.dtype), std::string("batch_decode: q must be float16 or bfloat16, got ") + dtype_name(q.dtype));
  REQUIRE(k.dtype == v.dtype, "batch_decode: k_cache and v_cache must have one dtype");
  REQUIRE(k.dtype == q.dtype || is_fp8(k.dtype),
          std::string("batch_decode: KV dtype must be q's dtype or float8, got ") + dtype_name(k.dtype));
  REQUIRE(k.shape == v.shape, "batch_decode: k_cache and v_cache must have one shape");
  check_same_device(k, q, kOp, "k_cache");
  check_same_device(v, q, kOp, "v_cache");
  const bool nhd = a.layout == KvLayout::kNHD;
  const std::int64_t D = q.size(2), Hq = q.size(1);
  const std::int64_t Hkv = nhd ? k.size(2) : k.size(1);
  const std::int64_t cache_page_size = nhd ? k.size(1) : k.size(2);
  REQUIRE(k.size(3) == D, "batch_decode: head dim of k_cache (" + std::to_string(k.size(3)) + ") differs from q's (" +
                              std::to_string(D) + ")");
  REQUIRE(D == 64 || D == 128 || D == 256,
          "batch_decode: head_dim " + std::to_string(D) + " is not built; this provider has 64, 128, 256");
  REQUIRE(Hkv > 0 && Hq % Hkv == 0, "batch_decode: num_qo_heads (" + std::to_string(Hq) +
                                        ") must be a multiple of num_kv_heads (" + std::to_string(Hkv) + ")");
  REQUIRE(q.stride(2) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
          "batch_decode: q, k_cache and v_cache need a contiguous last dimension");
  for (const TensorView* t : {&k, &v}) {
    const std::int64_t elem_per_16 = is_fp8(t->dtype) ? 16 : 8;
    for (int d = 0; d < 3; ++d)
      REQUIRE(t->stride(d) % elem_per_16 == 0, "batch_decode: KV cache strides must keep rows 16-byte aligned");
  }
  REQUIRE(a.q_len_per_req >= 1, "batch_decode: q_len_per_req must be at least 1");
  REQUIRE(q.size(0) % a.q_len_per_req == 0, "batch_decode: q rows must be a multiple of q_len_per_req");
  const std::int64_t batch = q.size(0) / a.q_len_per_req;
  if (a.indptr) {
    REQUIRE(a.indices && a.last_page_len, "batch_decode: indptr needs indices and last_page_len");
    check_int32_vector(a.indptr, q, "indptr");
    check_int32_vector(a.indices, q, "indices");
    check_int32_vector(a.last_page_len, q, "last_page_len");
    REQUIRE(a.indptr->size(0) == batch + 1, "batch_decode: indptr must have batch_size + 1 = " +
                                                std::to_string(batch + 1) + " entries, got " +
                                                std::to_string(a.indptr->size(0)));
    REQUIRE(a.last_page_len->size(0) == batch, "batch_decode: last_page_len must have batch_size entries");
    REQUIRE(a.page_size == cache_page_size, "batch_decode: page_size differs from the cache's");
  } else {
    REQUIRE(batch == 1, "batch_decode: without a page table there is one request");
    REQUIRE(a.kv_len_scalar >= 0 && a.kv_len_scalar <= cache_page_size, "batch_decode: kv_len out of range");
  }
  const TensorView& out = *a.out;
  check_rank(out, 3, kOp, "out");
  REQUIRE(out.shape == q.shape && out.dtype == q.dtype && out.stride(2) == 1, "batch_decode: out must match q");
  check_same_device(out, q, kOp, "out");
  if (a.lse) {
    check_rank(*a.lse, 2, kOp, "lse");
    check_dtype(*a.lse, DType::kFloat32, kOp, "lse");
    REQUIRE(a.lse->size(0) == q.size(0) && a.lse->size(1) == Hq && a.lse->stride(1) == 1 && a.lse->stride(0) == Hq,
            "batch_decode: lse must be contiguous (rows, num_qo_heads)");
  }
  const std::int64_t splits = a.max_splits < 1 ? 1 : a.max_splits;
  if (splits > 1) {
    REQUIRE(a.chunk_pages >= 1, "batch_decode: chunk_pages must be at least 1 with split-KV");
    REQUIRE(a.partial_out && a.partial_lse, "batch_decode: split-KV needs partial_out and partial_lse");
    check_dtype(*a.partial_out, DType::kFloat32, kOp, "partial_out");
    check_dtype(*a.partial_lse, DType::kFloat32, kOp, "partial_lse");
    const std::int64_t need_o = q.size(0) * splits * Hq * D, need_s = q.size(0) * splits * Hq;
    std::int64_t have_o = 1, have_s = 1;
    for (auto x : a.partial_out->shape) have_o *= x;
    for (auto x : a.partial_lse->shape) have_s *= x;
    REQUIRE(have_o >= need_o && have_s >= need_s, "batch_decode: split-KV buffers too small");
  }
  const std::int64_t row_blocks = (a.q_len_per_req * (Hq / Hkv) + kRowBlock - 1) / kRowBlock;
  if (a.arrivals) {
    check_int32_vector(a.arrivals, q, "arrivals");
    REQUIRE(a.arrivals->size(0) >= batch * row_blocks * Hkv,
            "batch_decode: arrivals needs batch_size x row blocks x num_kv_heads = " +
                std::to_string(batch * row_blocks * Hkv) + " entries, got " + std::to_string(a.arrivals->size(0)));
  }
  std::int64_t items = batch;  // grid items: requests, or work-list entries (runs of entries)
  std::int64_t entries = 1;     // work-list entries per CTA
  if (a.work) {
    REQUIRE(a.indptr != nullptr, "batch_decode: a work list needs a page table");
    REQUIRE(a.split_counts != nullptr && a.arrivals != nullptr,
            "batch_decode: a work list needs split_counts and arrivals");
    REQUIRE(a.work->ndim() == 2 || a.work->ndim() == 3,
            "batch_decode: work must be (items, 4) or (items, entries, 4), got rank " + std::to_string(a.work->ndim()));
    check_dtype(*a.work, DType::kInt32, kOp, "work");
    check_same_device(*a.work, q, kOp, "work");
    const int last = a.work->ndim() - 1;
    entries = a.work->ndim() == 3 ? a.work->size(1) : 1;
    REQUIRE(a.work->size(last) == 4 && a.work->stride(last) == 1 &&
                (entries <= 1 || a.work->stride(1) == 4) &&
                (a.work->size(0) <= 1 || a.work->stride(0) == 4 * entries) && a.work->data % 16 == 0,
            "batch_decode: work must be a contiguous, 16-byte aligned (items, 4) or (items, entries, 4) int32 tensor");
    REQUIRE(entries >= 1 && entries <= 0x7fffffff, "batch_decode: work needs at least one entry per item");
    REQUIRE(a.work->size(0) * entries >= batch, "batch_decode: the work list must cover every request");
    check_int32_vector(a.split_counts, q, "split_counts");
    REQUIRE(a.split_counts->size(0) == batch, "batch_decode: split_counts must have batch_size entries");
    items = a.work->size(0);
  }
  const std::int64_t group = Hq / Hkv;
  for (const TensorView* t : {a.alibi_slopes, a.sinks}) {
    if (!t) continue;
    check_rank(*t, 1, kOp, "per-head parameter");
    check_dtype(*t, DType::kFloat32, kOp, "per-head parameter");
    REQUIRE(t->size(0) == Hq && (Hq == 1 || t->stride(0) == 1), "batch_decode: per-head parameters need num_qo_heads entries");
  }
  REQUIRE(a.pos_encoding != PosEncoding::kAlibi || a.alibi_slopes, "batch_decode: ALiBi needs slopes");

  auto p = std::make_shared<PreparedDecode>();
  RawDecode& r = p->r;
  r.k_stride_page = k.stride(0);
  r.k_stride_slot = nhd ? k.stride(1) : k.stride(2);
  r.k_stride_head = nhd ? k.stride(2) : k.stride(1);
  r.v_stride_page = v.stride(0);
  r.v_stride_slot = nhd ? v.stride(1) : v.stride(2);
  r.v_stride_head = nhd ? v.stride(2) : v.stride(1);
  r.indptr = a.indptr ? a.indptr->ptr<const std::int32_t>() : nullptr;
  r.indices = a.indices ? a.indices->ptr<const std::int32_t>() : nullptr;
  r.last_page_len = a.last_page_len ? a.last_page_len->ptr<const std::int32_t>() : nullptr;
  // Without a page table the keys are slots of page 0 and a split's chunk_pages counts keys
  // (single decode), so the kernel's page arithmetic runs with pages of one key.
  r.page_size = a.indptr ? a.page_size : 1;
  r.kv_len_scalar = a.kv_len_scalar;
  r.out_stride_row = out.stride(0);
  r.out_stride_head = out.stride(1);
  r.partial_out = splits > 1 ? a.partial_out->ptr<float>() : nullptr;
  r.partial_lse = splits > 1 ? a.partial_lse->ptr<float>() : nullptr;
  r.work = a.work ? a.work->ptr<const std::int32_t>() : nullptr;
  r.work_entries = static_cast<int>(entries);
  r.split_counts = a.split_counts ? a.split_counts->ptr<const std::int32_t>() : nullptr;
  r.arrivals = a.arrivals ? a.arrivals->ptr<std::int32_t>() : nullptr;
  r.chunk_pages = a.chunk_pages;
  r.splits = splits;
  r.q_len = a.q_len_per_req;
  r.num_qo_heads = Hq;
  r.num_kv_heads = Hkv;
  r.group = group;
  r.sm_scale = a.sm_scale * a.k_scale;
  r.soft_cap = a.logits_soft_cap > 0.f ? a.logits_soft_cap : 0.f;
  r.window_left = a.window_left;
  r.pos_encoding = static_cast<int>(a.pos_encoding);
  r.rope_log2_theta = log2f(a.rope_theta);
  r.rope_inv_scale = 1.f / a.rope_scale;
  r.alibi_slopes = a.alibi_slopes ? a.alibi_slopes->ptr<const float>() : nullptr;
  r.v_scale = a.v_scale;
  r.sinks = a.sinks ? a.sinks->ptr<const float>() : nullptr;
  r.device = q.device;
  p->q_dtype = q.dtype;
  p->kv_dtype = k.dtype;
  p->head_dim = D;
  p->batch = batch;
  p->rows = q.size(0);
  p->num_qo_heads = Hq;
  p->splits = splits;
  p->work_list = a.work != nullptr;
  p->arrivals = a.arrivals != nullptr;
  p->out = out;
  p->out.data = 0;
  if (batch == 0) return p;  // nothing will launch: no grid, no device query
  // Heads (and query-row blocks) vary fastest, then requests or work items (cta_work); without
  // a work list splits slowest.
  const std::int64_t grid_x = items * Hkv * row_blocks;
  REQUIRE(grid_x <= 0x7fffffff, "batch_decode: batch_size x num_kv_heads is too large for one grid");
  p->grid = dim3(static_cast<unsigned>(grid_x), 1u, static_cast<unsigned>(a.work ? 1 : splits));
  throw_on_cuda_error(cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(&p->smem_limit, q.device), kOp,
                      q.device);
  throw_on_cuda_error(cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(&p->cc_major, q.device), kOp,
                      q.device);
  r.pdl = p->cc_major >= 9;
  // Keys one CTA streams at most: a split's chunk (with a work list, the largest item's pages),
  // or (unsplit) the planned longest request (chunk_pages is the longest request's page count
  // then) or the single request's length.
  p->keys_per_cta = (splits > 1 || a.indptr) ? a.chunk_pages * r.page_size : a.kv_len_scalar;
  p->cuda_core_smem = D == 64    ? decode_smem_dim<64>(q.dtype, k.dtype)
                      : D == 128 ? decode_smem_dim<128>(q.dtype, k.dtype)
                                 : decode_smem_dim<256>(q.dtype, k.dtype);
  return p;
}

void launch_prepared_decode(const PreparedDecode& p, const DecodeCall& c, std::uintptr_t stream_handle) {
  REQUIRE(c.q % 16 == 0 && c.k % 16 == 0 && c.v % 16 == 0 && c.q_stride_row % 8 == 0 && c.q_stride_head % 8 == 0,
          "batch_decode: q and the KV cache must be 16-byte aligned");
  if (p.batch == 0) return;
  // The kernels clamp page ids into [0, num_pages): an empty cache has no page to land on.
  REQUIRE(c.num_pages >= 1, "batch_decode: the paged KV cache holds no pages");
  RawDecode r = p.r;
  r.q = reinterpret_cast<const void*>(c.q);
  r.q_stride_row = c.q_stride_row;
  r.q_stride_head = c.q_stride_head;
  r.k = reinterpret_cast<const void*>(c.k);
  r.v = reinterpret_cast<const void*>(c.v);
  r.num_pages = c.num_pages;
  r.out = reinterpret_cast<void*>(c.out);
  r.lse = reinterpret_cast<float*>(c.lse);
  if (c.per_call) {
    r.sm_scale = c.sm_scale * c.k_scale;
    r.v_scale = c.v_scale;
    r.window_left = c.window_left;
    r.sinks = reinterpret_cast<const float*>(c.sinks);
  }
  const int device = r.device;
  const std::int64_t D = p.head_dim;
  auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  DeviceGuard guard(device);
  throw_on_cuda_error(guard.status(), kOp, device);
  r.stages = tensor_core_stages(D, p.smem_limit, p.keys_per_cta, is_fp8(p.kv_dtype) ? 1 : 2);
  const bool tc_kv = p.kv_dtype == p.q_dtype || is_fp8(p.kv_dtype);
  const bool tensor_cores =
      use_tensor_core_kernel(p.cc_major, r.stages, tc_kv, static_cast<PosEncoding>(r.pos_encoding));
  if (!tensor_cores) {
    REQUIRE(p.cuda_core_smem <= static_cast<std::size_t>(p.smem_limit),
            "batch_decode: head_dim " + std::to_string(D) + " with " + dtype_name(p.kv_dtype) + " KV needs " +
                std::to_string(p.cuda_core_smem / 1024) + " KB of shared memory per block; this GPU allows " +
                std::to_string(p.smem_limit / 1024) + " KB");
  }
  r.cluster_merge = use_cluster_merge(p.cc_major, tensor_cores, p.splits, p.work_list);
  int clustered = r.cluster_merge;
  r.cluster_merge_used = &clustered;
  cudaError_t err = cudaErrorInvalidValue;
  if (D == 64) err = launch_decode_d64(r, p.q_dtype, p.kv_dtype, tensor_cores, p.grid, stream);
  if (D == 128) err = launch_decode_d128(r, p.q_dtype, p.kv_dtype, tensor_cores, p.grid, stream);
  if (D == 256) err = launch_decode_d256(r, p.q_dtype, p.kv_dtype, tensor_cores, p.grid, stream);
  throw_on_cuda_error(err, kOp, device);
  if (p.splits > 1 && !p.arrivals && !clustered) {
    // Combine the splits: partial (rows, splits, Hq, D) -> out (rows, Hq, D), with sinks and v_scale.
    const std::int64_t rows = p.rows, Hq = p.num_qo_heads, splits = p.splits;
    const auto po_data = reinterpret_cast<std::uintptr_t>(r.partial_out);
    const auto ps_data = reinterpret_cast<std::uintptr_t>(r.partial_lse);
    const TensorView po{po_data, DType::kFloat32, {rows, splits, Hq, D}, {splits * Hq * D, Hq * D, D, 1}, device};
    const TensorView ps{ps_data, DType::kFloat32, {rows, splits, Hq}, {splits * Hq, Hq, 1}, device};
    TensorView out = p.out;
    out.data = c.out;
    const TensorView lse{c.lse, DType::kFloat32, {rows, Hq}, {Hq, 1}, device};
    throw_on_cuda_error(merge_dispatch(po, ps, out, c.lse ? &lse : nullptr, r.sinks, r.v_scale, r.pdl, stream),
                        "batch_decode merge", device);
  }
}

void launch_batch_decode(const DecodeArgs& a, std::uintptr_t stream) {
  const std::shared_ptr<const PreparedDecode> p = prepare_batch_decode(a);
  launch_prepared_decode(*p,
                         {a.q->data, a.q->stride(0), a.q->stride(1), a.k_cache->data, a.v_cache->data,
                          a.k_cache->size(0), a.out->data, a.lse ? a.lse->data : 0},
                         stream);
}

void launch_merge_states(const TensorView& v, const TensorView& s, const TensorView& v_out, const TensorView* s_out,
                         std::uintptr_t stream) {
  const char* op = "merge_states";
  check_rank(v, 4, op, "v");
  check_rank(s, 3, op, "s");
  check_dtype(s, DType::kFloat32, op, "s");
  check_rank(v_out, 3, op, "v_out");
  REQUIRE(v.stride(3) == 1 && v_out.stride(2) == 1, "merge_states: v needs a contiguous last dimension");
  REQUIRE(s.size(0) == v.size(0) && s.size(1) == v.size(1) && s.size(2) == v.size(2), "merge_states: s must be (N, S, H)");
  REQUIRE(v_out.size(0) == v.size(0) && v_out.size(1) == v.size(2) && v_out.size(2) == v.size(3),
          "merge_states: v_out must be (N, H, D)");
  if (s_out) {
    check_rank(*s_out, 2, op, "s_out");
    check_dtype(*s_out, DType::kFloat32, op, "s_out");
    REQUIRE(s_out->size(0) == v.size(0) && s_out->size(1) == v.size(2) && s_out->stride(1) == 1 &&
                s_out->stride(0) == v.size(2),
            "merge_states: s_out must be contiguous (N, H)");
  }
  DeviceGuard guard(v.device);
  throw_on_cuda_error(guard.status(), op, v.device);
  throw_on_cuda_error(merge_dispatch(v, s, v_out, s_out, nullptr, 1.f, false, reinterpret_cast<cudaStream_t>(stream)), op,
                      v.device);
}

void launch_merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                                 const TensorView& s_other, const TensorView* mask, std::uintptr_t stream) {
  const char* op = "merge_state_in_place";
  check_rank(v, 3, op, "v");
  check_rank(v_other, 3, op, "v_other");
  check_rank(s, 2, op, "s");
  check_rank(s_other, 2, op, "s_other");
  check_dtype(s, DType::kFloat32, op, "s");
  check_dtype(s_other, DType::kFloat32, op, "s_other");
  REQUIRE(v.shape == v_other.shape && v.dtype == v_other.dtype, "merge_state_in_place: v and v_other must match");
  REQUIRE(s.size(0) == v.size(0) && s.size(1) == v.size(1) && s.shape == s_other.shape,
          "merge_state_in_place: s and s_other must be (N, H)");
  REQUIRE(v.stride(2) == 1 && v_other.stride(2) == 1, "merge_state_in_place: v needs a contiguous last dimension");
  if (mask) {
    check_rank(*mask, 1, op, "mask");
    check_dtype(*mask, DType::kBool, op, "mask");
    check_length(*mask, v.size(0), op, "mask");
  }
  if (v.size(0) == 0 || v.size(1) == 0) return;
  DeviceGuard guard(v.device);
  throw_on_cuda_error(guard.status(), op, v.device);
  const dim3 grid(static_cast<unsigned>(v.size(0)), static_cast<unsigned>(v.size(1)));
  auto st = reinterpret_cast<cudaStream_t>(stream);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    MergeInPlaceParams<T> p{v.ptr<T>(),       v.stride(0),       v.stride(1),       s.ptr<float>(),
                            s.stride(0),      s.stride(1),       v_other.ptr<const T>(), v_other.stride(0),
                            v_other.stride(1), s_other.ptr<const float>(), s_other.stride(0), s_other.stride(1),
                            mask ? mask->ptr<const bool>() : nullptr, v.size(0), v.size(1), v.size(2)};
    merge_state_in_place_kernel<T><<<grid, kMergeThreads, 0, st>>>(p);
  };
  switch (v.dtype) {
    case DType::kFloat32: run(float{}); break;
    case DType::kFloat16: run(__half{}); break;
    case DType::kBFloat16: run(__nv_bfloat16{}); break;
    default: fail_argument("merge_state_in_place: v must be float32, float16 or bfloat16");
  }
  throw_on_cuda_error(cudaGetLastError(), op, v.device);
}

void launch_append_paged_kv_cache(const TensorView& key, const TensorView& value, const TensorView& batch_indices,
                                  const TensorView& positions, const TensorView& k_cache, const TensorView& v_cache,
                                  KvLayout layout, std::int64_t page_size, const TensorView& indices,
                                  const TensorView& indptr, std::uintptr_t stream) {
  const char* op = "append_paged_kv_cache";
  check_rank(key, 3, op, "append_key");
  check_rank(value, 3, op, "append_value");
  check_rank(k_cache, 4, op, "k_cache");
  check_rank(v_cache, 4, op, "v_cache");
  REQUIRE(key.shape == value.shape, "append_paged_kv_cache: append_key and append_value must have one shape");
  REQUIRE(key.dtype == k_cache.dtype && value.dtype == v_cache.dtype,
          "append_paged_kv_cache: appended keys/values must have the cache's dtype");
  REQUIRE(key.stride(2) == 1 && value.stride(2) == 1 && k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
          "append_paged_kv_cache: last dimensions must be contiguous");
  const bool nhd = layout == KvLayout::kNHD;
  const std::int64_t heads = nhd ? k_cache.size(2) : k_cache.size(1);
  REQUIRE(key.size(1) == heads && key.size(2) == k_cache.size(3), "append_paged_kv_cache: heads/head_dim mismatch");
  REQUIRE((nhd ? k_cache.size(1) : k_cache.size(2)) == page_size, "append_paged_kv_cache: page_size mismatch");
  REQUIRE(page_size >= 1, "append_paged_kv_cache: page_size must be at least 1");  // (positions / page_size)
  for (const TensorView* t : {&batch_indices, &positions, &indices, &indptr}) {
    check_rank(*t, 1, op, "page table");
    check_dtype(*t, DType::kInt32, op, "page table");
    REQUIRE(t->size(0) <= 1 || t->stride(0) == 1, "append_paged_kv_cache: index tensors must be contiguous");
  }
  REQUIRE(batch_indices.size(0) == key.size(0) && positions.size(0) == key.size(0),
          "append_paged_kv_cache: batch_indices and positions need one entry per appended token");
  const std::int64_t nnz = key.size(0);
  if (nnz == 0) return;
  DeviceGuard guard(key.device);
  throw_on_cuda_error(guard.status(), op, key.device);
  auto st = reinterpret_cast<cudaStream_t>(stream);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    AppendParams<T> p;
    p.key = key.ptr<const T>();
    p.value = value.ptr<const T>();
    p.key_stride_n = key.stride(0);
    p.key_stride_h = key.stride(1);
    p.value_stride_n = value.stride(0);
    p.value_stride_h = value.stride(1);
    p.batch_indices = batch_indices.ptr<const std::int32_t>();
    p.positions = positions.ptr<const std::int32_t>();
    p.k_cache = k_cache.ptr<T>();
    p.v_cache = v_cache.ptr<T>();
    p.k_stride_page = k_cache.stride(0);
    p.k_stride_slot = nhd ? k_cache.stride(1) : k_cache.stride(2);
    p.k_stride_head = nhd ? k_cache.stride(2) : k_cache.stride(1);
    p.v_stride_page = v_cache.stride(0);
    p.v_stride_slot = nhd ? v_cache.stride(1) : v_cache.stride(2);
    p.v_stride_head = nhd ? v_cache.stride(2) : v_cache.stride(1);
    p.indices = indices.ptr<const std::int32_t>();
    p.indptr = indptr.ptr<const std::int32_t>();
    p.nnz = nnz;
    p.heads = heads;
    p.dim = key.size(2);
    p.page_size = page_size;
    p.batch = indptr.size(0) - 1;
    p.num_pages = k_cache.size(0);
    p.num_indices = indices.size(0);
    append_kv_kernel<T><<<static_cast<unsigned>(nnz), 128, 0, st>>>(p);
  };
  switch (key.dtype) {
    case DType::kFloat16: run(__half{}); break;
    case DType::kBFloat16: run(__nv_bfloat16{}); break;
    case DType::kFloat32: run(float{}); break;
    case DType::kFloat8E4M3: run(__nv_fp8_e4m3{}); break;
    case DType::kFloat8E5M2: run(__nv_fp8_e5m2{}); break;
    default: fail_argument(std::string("append_paged_kv_cache: unsupported dtype ") + dtype_name(key.dtype));
  }
  throw_on_cuda_error(cudaGetLastError(), op, key.device);
}

}  // namespace aotinfer::attention

#undef REQUIRE
