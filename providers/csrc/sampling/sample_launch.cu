// Host launchers for the row kernels of the sampling family (filter_sample.cuh,
// top_k_select.cuh, chain_speculative.cuh): defensive checks on the views, dtype dispatch,
// launch. Variants: sampling and top-p renorm from float32; top-k renorm, mask and top-k
// select for float32, float16 and bfloat16 (see kernel_list.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "../common/device_guard.h"
#include "../common/env_switch.h"
#include "../common/launch_cache.h"
#include "../common/status.h"
#include "../common/view_checks.h"
#include "chain_speculative.cuh"
#include "filter_sample.cuh"
#include "slice_kernels.cuh"
#include "sampling_launchers.h"
#include "top_k_select.cuh"

namespace aotinfer::sampling {
namespace {

void check_per_row(const TensorView* v, DType dtype, std::int64_t rows, const TensorView& ref,
                   const char* op, const char* name) {
  if (v == nullptr) return;
  check_rank(*v, 1, op, name);
  check_dtype(*v, dtype, op, name);
  check_length(*v, rows, op, name);
  check_same_device(*v, ref, op, name);
  if (rows > 1 && v->stride(0) != 1) fail_argument(std::string(op) + ": " + name + " must be contiguous");
}

FilterParams filter_params(const FilterArgs& f, std::int64_t rows, const TensorView& ref, const char* op) {
  check_per_row(f.top_k, DType::kInt32, rows, ref, op, "top_k");
  check_per_row(f.top_p, DType::kFloat32, rows, ref, op, "top_p");
  check_per_row(f.min_p, DType::kFloat32, rows, ref, op, "min_p");
  FilterParams p;
  p.mode = f.mode;
  p.top_k_array = f.top_k ? f.top_k->ptr<const std::int32_t>() : nullptr;
  p.top_k = f.top_k_scalar;
  p.top_p_array = f.top_p ? f.top_p->ptr<const float>() : nullptr;
  p.top_p = f.top_p_scalar;
  p.min_p_array = f.min_p ? f.min_p->ptr<const float>() : nullptr;
  p.min_p = f.min_p_scalar;
  return p;
}

void check_seed_view(const TensorView* v, std::int64_t batch, const TensorView& ref, const char* op,
                     const char* name) {
  if (v == nullptr) return;
  check_rank(*v, 1, op, name);
  if (v->dtype != DType::kInt64 && v->dtype != DType::kUInt64) {
    fail_argument(std::string(op) + ": " + name + " must be int64 or uint64, got " + dtype_name(v->dtype));
  }
  if (v->size(0) != 1 && v->size(0) != batch) {
    fail_argument(std::string(op) + ": " + name + " must have length 1 or " + std::to_string(batch) +
                  ", got " + std::to_string(v->size(0)));
  }
  if (v->size(0) > 1 && v->stride(0) != 1) fail_argument(std::string(op) + ": " + name + " must be contiguous");
  check_same_device(*v, ref, op, name);
}

RandomParams random_params(const RandomArgs& r, std::int64_t batch, const TensorView& ref, const char* op) {
  check_seed_view(r.seed, batch, ref, op, "seed");
  check_seed_view(r.offset, batch, ref, op, "offset");
  RandomParams p;
  p.seed_array = r.seed ? r.seed->ptr<const std::uint64_t>() : nullptr;
  p.seed_length = r.seed ? r.seed->size(0) : 0;
  p.seed = r.seed_scalar;
  p.offset_array = r.offset ? r.offset->ptr<const std::uint64_t>() : nullptr;
  p.offset_length = r.offset ? r.offset->size(0) : 0;
  p.offset = r.offset_scalar;
  return p;
}

bool is_index_dtype(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

void check_matrix(const TensorView& v, const char* op, const char* name) {
  check_rank(v, 2, op, name);
  check_rows_dense(v, op, name);
}

// The row kernels index a row's elements in 32 bits (segment_pass.cuh, row_access.cuh), and
// count its groups of four as (n + 3) / 4 in int: 2^31 - 4 is the longest row that neither
// overflows.
constexpr std::int64_t kMaxRowLength = (std::int64_t{1} << 31) - 4;

void check_row_length(const TensorView& v, const char* op, const char* name) {
  if (v.size(1) > kMaxRowLength) {
    fail_argument(std::string(op) + ": " + name + " rows must have at most " + std::to_string(kMaxRowLength) +
                  " elements, got " + std::to_string(v.size(1)));
  }
}

void finish(cudaError_t err, const char* op, int device) { throw_on_cuda_error(err, op, device); }

// The cluster kernels of slice_kernels.cuh serve sm_90+ rows of at least kSliceMinVocab
// elements whose slice fits in shared memory beside the radix histograms (shorter rows are
// not worth a cluster), in batches small enough for about two waves of clusters.
// AOTINFER_SAMPLING_KERNEL=rowwise|cluster pins one kernel family wherever both apply (tests
// and benchmarks cover both).
constexpr std::int64_t kSliceMinVocab = 8192;
constexpr std::int64_t kSliceStaticSmem = 32 * 1024;  // RadixShared (~25 KB) and reduction scratch

std::int64_t slice_groups(std::int64_t vocab, int ctas = kSliceCtas) { return ((vocab + 3) / 4 + ctas - 1) / ctas; }

// Whether a CTA's slice of a row of `vocab` in clusters of `ctas` fits in `smem_limit` bytes of
// shared memory beside a kernel's `static_smem`.
bool slice_fits(std::int64_t vocab, int ctas, std::int64_t static_smem, int smem_limit) {
  return slice_groups(vocab, ctas) * 16 + static_smem <= smem_limit;
}

// Clusters of kWideSliceCtas (half a slice per CTA, twice the SMs) for up to 4 rows of a
// large vocabulary, where the GPU can place them. Measured on an H200 against clusters of 8
// (graph us, A B A B, one row unless said; history/ab-sampling-wide-clusters-c410d14.txt,
// -vocabs-95c5303.txt, -rows-f1b7d4d.txt, ab-sampling-slice-ctas-16-f75ac35.txt), by what
// dominates the kernel (1, 2, 3 and 4 rows alike):
// - per-element kernels (kDrawBounds, kListBounds), where per-element passes dominate (the
//   top-k and two-search samplers drawing from the CTAs' lists, min-p, plain sampling):
//   0.99-1.02x at 32000, 0.95-1.00x at 40960, 0.88-0.98x at 50304-65536, 0.82-0.91x at
//   98304-112000, 0.75-0.88x at 128256-256000;
// - search kernels (kSearchBounds), where cluster-wide radix searches dominate, their every
//   level paying 16-way pushes and combines (the top-p sampler by its threshold search, as it
//   then was; renorm, top-k masking): 1.03-1.17x up to 65536, 0.98-1.02x at 98304,
//   0.95-1.00x at 112000, 0.93-0.97x at 128256-151936, 0.87-0.89x at 256000;
// - at 8 rows 1.13-1.47x at 65536; at 128256 0.94-1.07x for the first kind, 1.09-1.21x for
//   the second; at 16 rows most ops 1.3-1.8x (the GPCs do not hold that many clusters of 16).
// (A top-k row with k above the list's reach searches cluster-wide inside the list kernel,
// under kListBounds: it is not a goal case.) Top-p by rejection, which came later, has bounds
// of its own (kRejectionBounds, below).
// Clusters of kNarrowSliceCtas (twice the slice per CTA, half the barrier fan-in) from
// kNarrowSliceMinRows rows on, up to each kind's narrow_max_vocab. Measured on an H200
// against clusters of 8 (graph us, A B A B; history/ab-sampling-cluster-ctas-4-d128e6a.txt,
// ab-sampling-slice-ctas-4-90af1a8.txt), flat and peaked rows:
// - at 32000 and 65536, from 16 rows on: 16 rows 0.73-0.85x (top-k 0.94-0.99x, joint
//   0.84-1.02x), 32 rows 0.65-0.81x (top-k 0.88-0.92x, joint 0.94-0.97x), 64 rows 0.60-0.85x;
//   at 2 to 12 rows slower (top-k 1.13-1.25x, joint 1.10-1.22x, the rest 0.95-1.10x);
// - at 128256 (one CTA of 128 KB a SM): 16 rows 0.89-0.99x but top-k and joint 1.00-1.08x,
//   and 32 and 64 rows 0.97-1.30x; 2 to 12 rows 1.11-1.43x.
// - at 13 to 15 rows x 32000 and 65536 as at 12 (top-k 1.13-1.19x, joint 1.09-1.18x, top-k
//   masking 0.95-0.97x, the rest 0.96-1.04x;
//   history/ab-sampling-cluster-ctas-4-13-15-rows-2319fe6.txt);
// - at 81920 (80 KB a CTA, two a SM) 16 to 64 rows 0.69-0.94x but top-k 1.01-1.21x and joint
//   0.93-1.18x; at 98304 16 rows 0.84-0.94x (top-k / joint 0.96-1.08x), 32 and 64 rows
//   0.94-1.06x (top-k / joint 1.13-1.27x) (history/ab-sampling-cluster-ctas-4-vocabs-2319fe6.txt).
// So the lists (top-k, two searches) take clusters of 4 up to 65536 and the other kernels up to
// 81920. Clusters of 4 do not move the batch bound of use_slice_kernels: at 80 and 128 rows
// they ran 1.14-2.88x the row kernels (history/ab-sampling-cluster-4-vs-rowwise-d128e6a.txt).
// AOTINFER_SAMPLING_CLUSTER_CTAS: auto (these rules), 4, 8 or 16 (that size wherever the slice
// kernels run and the clusters fit, else 8: tests and A/B runs).
struct SliceBounds {
  std::int64_t wide_min_vocab;    // clusters of 16 for up to kWideSliceMaxRows rows from this vocab on
  std::int64_t narrow_max_vocab;  // clusters of 4 from kNarrowSliceMinRows rows up to this vocab
};
constexpr SliceBounds kDrawBounds{40960, 81920};     // min-p (and plain sampling until session 64)
constexpr SliceBounds kListBounds{40960, 65536};     // the top-k and two-search samplers' lists
constexpr SliceBounds kSearchBounds{112000, 81920};  // cluster-wide searches: renorm, mask, threshold top-p
// Top-p by rejection (top_p_rejection.cuh) searches nothing: a round is a pass, a draw and
// three cluster exchanges, so at up to 4 rows it takes clusters of 16 from the per-element
// kernels' bound on. Measured on an H100 against clusters of 8 (graph us, c8 c16 c8 c16, one
// process each, AOTINFER_SAMPLING_CLUSTER_CTAS; history/ab-sampling-top-p-cluster-ctas-16-
// b467728-h100.txt): 1-4 rows of 32000 1.015-1.024x, 40960 0.980-0.992x, 50304 0.968-0.977x,
// 65536 0.956-0.963x, 98304 0.867-0.869x. Its narrow bound is the searches' (unmeasured apart).
constexpr SliceBounds kRejectionBounds{40960, 81920};
constexpr std::int64_t kWideSliceMaxRows = 4;
constexpr std::int64_t kNarrowSliceMinRows = 16;
// A CTA of a cluster of 4 holds at most 2^15 floats: the slice length for which joint's slack
// (cluster_local_top_k.cuh's two_search_list_filter) is shown to hold.
constexpr std::int64_t kNarrowSliceMaxVocab = std::int64_t{kNarrowSliceCtas} << 15;

int wanted_slice_ctas(std::int64_t rows, std::int64_t vocab, SliceBounds bounds) {
  const std::string want = env_choice("AOTINFER_SAMPLING_CLUSTER_CTAS", {"auto", "4", "8", "16"});
  if (!want.empty() && want != "auto") return std::stoi(want);  // "" when unset
  if (rows <= kWideSliceMaxRows && vocab >= bounds.wide_min_vocab) return kWideSliceCtas;
  return rows >= kNarrowSliceMinRows && vocab <= bounds.narrow_max_vocab ? kNarrowSliceCtas : kSliceCtas;
}

// Whether a row of `vocab` fits clusters of kNarrowSliceCtas under a device's `smem_limit`
// (shared_memory_limit): its slice beside the largest static shared memory of the slice
// kernels (the list kernels').
bool narrow_slices_fit(std::int64_t vocab, int smem_limit) {
  return vocab <= kNarrowSliceMaxVocab &&
         slice_fits(vocab, kNarrowSliceCtas, local_list_static_smem(kNarrowSliceCtas), smem_limit);
}

// Whether `Kernel` runs in clusters of kWideSliceCtas with `smem` bytes of dynamic shared
// memory on `device` (the current one): clusters beyond 8 are non-portable, allowed per kernel,
// and a GPU whose GPCs cannot hold 16 such CTAs has none to give. Asked once per kernel and
// device and remembered (the largest size that fit, the smallest that did not), since each
// runtime call costs host time on every eager call; a failed query is cleared from the
// runtime's last error and answers no.
template <auto Kernel>
bool wide_clusters_fit(int device, int smem) {
  static std::atomic<int> fits[kMaxCachedDevices] = {};    // largest smem seen to fit (0: none)
  static std::atomic<int> misses[kMaxCachedDevices] = {};  // smallest smem seen not to (0: none)
  if (device < 0 || device >= kMaxCachedDevices) return false;
  if (smem <= fits[device].load(std::memory_order_relaxed)) return true;
  const int miss = misses[device].load(std::memory_order_relaxed);
  if (miss != 0 && smem >= miss) return false;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kWideSliceCtas);
  config.blockDim = dim3(kSliceThreads);
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kWideSliceCtas;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  cudaError_t err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err == cudaSuccess) err = ensure_dynamic_smem<Kernel>(smem, device);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveClusters(&clusters, Kernel, &config);
  const bool ok = err == cudaSuccess && clusters >= 1;
  if (err != cudaSuccess) cudaGetLastError();
  if (ok) {
    raise_to(fits[device], smem);
  } else {
    lower_to(misses[device], smem);
  }
  return ok;
}

int shared_memory_limit(int device, const char* op) {
  int limit = 0;
  finish(cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(&limit, device), op, device);
  return limit;
}

// The device's multiprocessors (cached_device_attribute: one runtime query per device).
std::int64_t multiprocessors(int device, const char* op) {
  int sms = 0;
  finish(cached_device_attribute<cudaDevAttrMultiProcessorCount>(&sms, device), op, device);
  return sms;
}

// An op's own cluster bound below the general one (sampler_max_cluster_rows,
// row_filter_max_cluster_rows), in rows at 132 SMs (H100 and H200), where it was measured. It
// scales with the SMs: the clusters spread a few rows over every SM where the row kernels leave
// SMs idle, so where they stop paying depends on the rows per SM (no other SM count has been
// measured).
constexpr std::int64_t kNoOwnBound = INT64_MAX;

bool use_slice_kernels(int device, std::int64_t rows, std::int64_t vocab, const char* op,
                       std::int64_t max_rows_at_132_sms = kNoOwnBound) {
  const std::string want = env_choice("AOTINFER_SAMPLING_KERNEL", {"rowwise", "cluster", "auto"});
  if (want == "rowwise" || vocab == 0) return false;
  int major = 0;
  finish(cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(&major, device), op, device);
  const int smem_limit = shared_memory_limit(device, op);
  const std::int64_t sms = multiprocessors(device, op);
  if (major < 9 || !slice_fits(vocab, kSliceCtas, kSliceStaticSmem, smem_limit)) return false;
  // Measured on an H200 (dev/sweep_sampling.py, vocab 128256): at batch 1 the clusters take
  // top-k / top-p from 88 / 140 us to 39 / 49 us (graph); at batch 128 (four waves of
  // clusters, two CTAs per SM) they lose, 228 / 286 us against 125 / 173 us. So they serve
  // batches whose clusters fit in about two waves.
  const bool own_bound_holds = max_rows_at_132_sms == kNoOwnBound || rows <= max_rows_at_132_sms * sms / 132;
  return want == "cluster" || (vocab >= kSliceMinVocab && rows * kSliceCtas <= 4 * sms && own_bound_holds);
}

// Plain sampling reads its row once (top_p_rejection_draw's round 0 with p = 1) and searches
// nothing, so the clusters' spread over more SMs pays for their barriers over fewer rows than
// for the other samplers. Measured on an H100, clusters against the row kernels (graph us,
// AOTINFER_SAMPLING_KERNEL auto / rowwise, A B A B; history/ab-sampling-plain-cluster-vs-
// rowwise-c549273-h100.txt, ab-sampling-cluster-vs-rowwise-40-64-rows-c549273-h100.txt):
// - vocab 32000 (clusters of 4 from 16 rows): the clusters 0.65-0.69x the time at 1-16 rows,
//   0.89x at 32, 0.92-0.94x at 40-56, but 1.15-1.19x at 64;
// - vocab 128256 (clusters of 8): 0.35-0.60x at 1-16 rows, 0.92x at 32, but 1.04x at 40,
//   1.10x at 48, 1.13x at 56, 1.35-1.36x at 64.
// So plain sampling keeps the clusters up to 56 rows where clusters of 4 serve the vocabulary
// and up to 32 rows above it (57-63 and 33-39 rows unmeasured).
// The other samplers search, and their clusters win over more rows. Measured on an H100, the
// row kernels' graph time over the clusters' at 40-66 rows of 32000-256000 (cluster against
// rowwise, A B A B in one machine start; history/ab-sampling-sampler-cluster-rows-a57285a-
// h100.txt, and auto against cluster at 45-52 rows, ab-sampling-sampler-bounds-859b796-h100.txt
// and -7798d9e-h100.txt):
// top-p 1.12-1.60x everywhere (256000: 0.98-1.08x from 60 rows); top-k, joint and top-k then
// top-p 1.18-2.17x up to 81920 (clusters of 4); above it
// - top-k 1.03-1.10x at 60 rows of 128256-151936, 0.91-0.99x from 62; at 200064-256000
//   1.00-1.12x at 40-45 rows, 0.84-0.93x from 48 (0.69-0.77x at 64);
// - joint and top-k then top-p 1.05-1.20x at 49 rows of 151936-256000, 0.91-0.99x from 52
//   (1.0-1.1x at 64-66 rows of 128256);
// - min-p (which draws, clusters of 4 to 81920) 1.09-1.23x to 62 rows, 0.93x at 64 rows of
//   32000 (1.00x at 65536); 1.02-1.05x to 66 rows of 128256; above 131072 0.98-1.15x to 60,
//   0.87-0.96x from 61.
// So these bounds at 132 SMs, under the general 66 (at 52 rows of 256000 the two-search filters
// ran 1.02-1.04x the clusters' time: their step falls a few rows later there).
std::int64_t sampler_max_cluster_rows(FilterMode mode, bool plain, std::int64_t vocab) {
  // 81920: clusters of 4 serve min-p and plain sampling up to here (top-k's lists to 65536).
  const bool narrow = vocab <= kDrawBounds.narrow_max_vocab;
  const bool two_searches = mode == FilterMode::kJoint || mode == FilterMode::kTopKThenTopP;
  if (plain) return narrow ? 56 : 32;
  if (mode == FilterMode::kMinP && (narrow || vocab > 131072)) return narrow ? 62 : 60;
  if (mode == FilterMode::kTopK && !narrow) return vocab > 163840 ? 47 : 60;
  if (two_searches && vocab > 131072) return 51;
  return kNoOwnBound;
}

// Renormalisation and top-k masking search cluster-wide at every level (kSearchBounds), and
// their clusters lose to the row kernels from fewer rows than the general bound's 66. Measured
// on an H100, the row kernels' graph time over the clusters' (AOTINFER_SAMPLING_KERNEL rowwise
// against auto / cluster, A B A B in one machine start, flat and peaked rows, 16-64 rows of
// 32000-256000; history/ab-sampling-row-filter-cluster-rows-0ab8ce8-h100.txt):
// - up to 28 rows the clusters win everywhere (1.04-2.16x); at 64 rows the row kernels win
//   everywhere (0.60-0.93x: 64 x 128256 top-k renorm 74.5 -> 50.1 us);
// - clusters of 4 (vocab <= 81920) take a step up once their rows pass what the card holds at
//   once: at 31 rows of 32000-40960 (the count searches 1.04-1.25x at 30, 0.92-1.07x at 31)
//   and at 63 rows of 50304-81920 (1.01-1.18x at 62 but at 50304 0.91-1.02x; 0.76-0.97x at
//   63); short rows' top-p renorm stays about even from 31 to 48 rows (0.93-1.12x);
// - clusters of 8 (above 81920) lose smoothly after their step at 29-32 rows: the row kernels
//   even out at about 38 rows for the mask (0.91-1.02x at 256000, 1.00-1.01x at 128256), 34
//   for top-k renorm (0.94-1.05x) and 44-46 for top-p renorm (0.94-1.21x; 1.19x at 44 rows of
//   256000, 0.99x at 46).
// So these bounds at 132 SMs; 41-47 rows of short rows' top-p renorm are unmeasured.
enum class RowFilterKind { kMask, kTopKRenorm, kTopPRenorm };
constexpr std::int64_t kRowFilterShortRowsVocab = 49152;
std::int64_t row_filter_max_cluster_rows(std::int64_t vocab, RowFilterKind kind) {
  if (vocab > kSearchBounds.narrow_max_vocab) {
    return kind == RowFilterKind::kMask ? 38 : kind == RowFilterKind::kTopKRenorm ? 34 : 45;
  }
  if (vocab > kRowFilterShortRowsVocab) return 62;
  return kind == RowFilterKind::kTopPRenorm ? 40 : 30;
}

// AOTINFER_SAMPLING_ROW_THREADS: the pinned size of the one-CTA-per-row kernels (256, 512 or
// 1024), 0 when unset or auto. 256 only the rejection kernels have (rejection_row_threads);
// row_threads gives the others 512 for it.
int pinned_row_threads() {
  const std::string want = env_choice("AOTINFER_SAMPLING_ROW_THREADS", {"256", "512", "1024", "auto"});
  return want.empty() || want == "auto" ? 0 : std::stoi(want);
}

// Threads of the one-CTA-per-row kernels unless the switch pins them: kRowThreads, or half as
// many at two CTAs per SM once a batch fills two waves of the big CTAs
// (dev/time_sampling_graph.py compares them).
int row_threads(int device, std::int64_t rows, const char* op) {
  const int pinned = pinned_row_threads();
  if (pinned != 0) return pinned == kRowThreads ? kRowThreads : kRowThreads / 2;
  return rows >= 2 * multiprocessors(device, op) ? kRowThreads / 2 : kRowThreads;
}

// Whether the row kernels gather a search's crossing bin into shared memory (gather.cuh):
// AOTINFER_SAMPLING_GATHER=off|on (default on) pins it; tests and A/B runs cover both.
bool gather_enabled() { return env_switch_on("AOTINFER_SAMPLING_GATHER"); }

// The static shared memory of `Kernel` (its RadixShared and scratch), read once.
template <auto Kernel>
int static_smem_bytes(int device, const char* op) {
  static std::atomic<int> bytes{-1};
  int b = bytes.load(std::memory_order_relaxed);
  if (b < 0) {
    cudaFuncAttributes attr{};
    finish(cudaFuncGetAttributes(&attr, Kernel), op, device);
    b = static_cast<int>(attr.sharedSizeBytes);
    bytes.store(b, std::memory_order_relaxed);
  }
  return b;
}

// A floor for short rows, not a measured optimum (rows this short are cheap to read again).
constexpr std::int64_t kMinGatherCapacity = 256;

// From this vocabulary on a row (of floats: 256 KB) is beyond L1's reach between passes.
constexpr std::int64_t kRowBeyondL1Vocab = 65536;

// The dynamic shared memory of a row kernel of `threads` threads: the draw's segment masses
// when `segments`, then gathered keys and positions (8 bytes an element) for a share of the
// row (at least kMinGatherCapacity), within what the SM has for each of its
// kRowCtasPerSm(threads) CTAs beyond the static part (gathering is off where that is less).
// A search gathers a bin that fills at most three quarters of the list. The share:
// - 1/32 where the row stays in L1 between passes (vocab 32000: 128 KB) or two CTAs share an
//   SM: the rest of the SM's 256 KB is L1 cache. With all of it as shared memory, top-p at
//   32000 was 1.07-1.14x slower; with 1/8, flat top-p at 128 x 32000 (bin ~5% of the row,
//   then gathered) 1.05x, and at 512 rows of 128256 (two CTAs per SM) every sampler
//   1.01-1.03x (3de4732, dev/ab_provider_builds.sh).
// - 1/8 for one CTA per SM and rows beyond L1: a flat top-p row's crossing bin (~5% of the
//   row) is then gathered; at 128 x 128256 flat top-p 101.6 -> 95.2 us and top-p renorm
//   103.0 -> 96.2, the rest unchanged (same A/B).
// - 1/8 also for the top-p sampler's two kernels at two CTAs per SM, rows beyond L1: the
//   budget then caps the list near 10K entries at 128256, and with the gather test at 3/4
//   (radix_threshold.cuh) a flat row's bin (~6500 keys) is gathered: flat top-p at 512 x
//   128256 293.9 -> 256.2 us (0.872x), peaked 1.012x (its L1), every other case 0.99-1.005x,
//   the same tokens (history/ab-sampling-wide-gather-top-p-55dcb09.txt, dev/NOTES.md item
//   59). The wide list for every two-CTA kernel took the same flat top-p case to 0.862x but
//   cost masking, top-k renorm and peaked top-p renorm 3-5% through their L1, and 1/8 at
//   vocab 32000 read 0.97-1.07x (history/ab-sampling-gather-share-labs-461b1c3.txt).
template <auto Kernel>
constexpr bool is_top_p_sampler() {
  using TopP = decltype(&sample_kernel<FilterFamily::kTopP>);
  if constexpr (std::is_same_v<decltype(Kernel), TopP>) {
    return Kernel == &sample_kernel<FilterFamily::kTopP> ||
           Kernel == &sample_kernel<FilterFamily::kTopP, kRowThreads / 2>;
  } else {
    return false;
  }
}

template <auto Kernel>
std::int64_t gather_share(int threads, std::int64_t vocab) {
  if (vocab < kRowBeyondL1Vocab) return 32;
  return kRowCtasPerSm(threads) == 1 || is_top_p_sampler<Kernel>() ? 8 : 32;
}

// The two-search sampler's list of its top-k set (GatherMode::kKeptSet, kept_set_list.cuh):
// a fixed size, since it holds about k keys, not a share of the row; kept sets of more than
// half of it (k beyond ~512 keys) are searched in the row instead.
constexpr std::int64_t kKeptListCapacity = 1024;

// `draws`: a sampler's kernel, whose draw may read the list (with kHeadBound:
// launch_sample_rows).
template <auto Kernel>
GatherSizes gather_sizes(int device, int threads, std::int64_t vocab, GatherMode gather, bool draws, const char* op) {
  const bool segments = gather == GatherMode::kSearchAndDraw || gather == GatherMode::kKeptSet ||
                        (draws && gather == GatherMode::kHeadBound);
  int per_sm = 0, optin = 0, reserved = 0;
  finish(cached_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>(&per_sm, device), op, device);
  finish(cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(&optin, device), op, device);
  finish(cached_device_attribute<cudaDevAttrReservedSharedMemoryPerBlock>(&reserved, device), op, device);
  const std::int64_t per_cta = std::min<std::int64_t>(optin, per_sm / kRowCtasPerSm(threads) - reserved);
  const std::int64_t budget = per_cta - static_smem_bytes<Kernel>(device, op);
  const std::int64_t seg =
      segments ? SegmentLayout::of((vocab + 3) / 4, RadixShared::kDrawSegments).segments : 0;
  const std::int64_t want = gather == GatherMode::kKeptSet
                                ? kKeptListCapacity
                                : std::max<std::int64_t>(vocab / gather_share<Kernel>(threads, vocab), kMinGatherCapacity);
  const std::int64_t capacity = std::min<std::int64_t>({(budget - 8 * seg) / 8, want, vocab});
  if (capacity < kMinGatherCapacity) return GatherSizes{0, 0};
  return GatherSizes{static_cast<std::uint32_t>(seg), static_cast<std::uint32_t>(capacity)};
}

template <auto Kernel, typename Params>
void launch_row_kernel(Params p, std::int64_t rows, int threads, int device, cudaStream_t stream, GatherMode gather,
                       const char* op) {
  p.gather = gather != GatherMode::kOff && gather_enabled()
                 ? gather_sizes<Kernel>(device, threads, p.vocab, gather, std::is_same_v<Params, SampleParams>, op)
                 : GatherSizes{0, 0};
  const int smem = static_cast<int>(8 * (p.gather.segments + p.gather.capacity));
  if (smem > 0) finish(ensure_dynamic_smem<Kernel>(smem, device), op, device);
  Kernel<<<static_cast<unsigned>(rows), threads, smem, stream>>>(p);
}

template <auto Big, auto Half, typename Params>
void launch_rows(const Params& p, std::int64_t rows, int device, cudaStream_t stream, GatherMode gather, const char* op) {
  if (row_threads(device, rows, op) == kRowThreads) {
    launch_row_kernel<Big>(p, rows, kRowThreads, device, stream, gather, op);
  } else {
    launch_row_kernel<Half>(p, rows, kRowThreads / 2, device, stream, gather, op);
  }
  finish(cudaGetLastError(), op, device);
}

// One cluster per row, each CTA with its slice in dynamic shared memory, in clusters of the
// size wanted_slice_ctas names where they fit (Narrow's of kNarrowSliceCtas, Wide's of
// kWideSliceCtas), else Kernel's of kSliceCtas. `smem_limit`: shared_memory_limit(device).
template <auto Narrow, auto Kernel, auto Wide, typename Params>
cudaError_t launch_slices(const Params& p, std::int64_t rows, std::int64_t vocab, SliceBounds bounds, int device,
                          int smem_limit, cudaStream_t stream) {
  const int want = wanted_slice_ctas(rows, vocab, bounds);
  int ctas = kSliceCtas;
  auto kernel = Kernel;
  if (want == kWideSliceCtas && wide_clusters_fit<Wide>(device, static_cast<int>(slice_groups(vocab, kWideSliceCtas) * 16))) {
    ctas = kWideSliceCtas;
    kernel = Wide;
  } else if (want == kNarrowSliceCtas && narrow_slices_fit(vocab, smem_limit)) {
    ctas = kNarrowSliceCtas;
    kernel = Narrow;
  }
  const std::int64_t groups = slice_groups(vocab, ctas);
  cudaError_t err = cudaSuccess;  // wide_clusters_fit raised Wide's limit already
  if (ctas == kSliceCtas) err = ensure_dynamic_smem<Kernel>(static_cast<int>(groups * 16), device);
  if (ctas == kNarrowSliceCtas) err = ensure_dynamic_smem<Narrow>(static_cast<int>(groups * 16), device);
  if (err != cudaSuccess) return err;
  return launch_in_clusters(kernel, dim3(static_cast<unsigned>(rows * ctas)), dim3(kSliceThreads),
                            static_cast<std::size_t>(groups * 16), stream, false, dim3(ctas, 1, 1), p, groups);
}

// The sampler's slice kernels in all three cluster sizes, at kCtasPerSm CTAs a SM.
template <FilterFamily kFamily, bool kLocalList, int kCtasPerSm>
cudaError_t launch_sample_slices(const SampleParams& p, std::int64_t batch, SliceBounds bounds, int device,
                                 int smem_limit, cudaStream_t stream) {
  return launch_slices<sample_slice_kernel<kFamily, kLocalList, kNarrowSliceCtas, kCtasPerSm>,
                       sample_slice_kernel<kFamily, kLocalList, kSliceCtas, kCtasPerSm>,
                       sample_slice_kernel<kFamily, kLocalList, kWideSliceCtas, kCtasPerSm>>(
      p, batch, p.vocab, bounds, device, smem_limit, stream);
}

template <FilterFamily kFamily, bool kLocalList = false>
cudaError_t launch_slice_samplers(const SampleParams& p, std::int64_t batch, SliceBounds bounds, int device,
                                  int smem_limit, cudaStream_t stream) {
  // The two-search list kernels at one CTA a SM for a few rows (slice_kernels.cuh says why).
  constexpr std::int64_t kOneCtaMaxRows = 4;
  if constexpr (kLocalList && kFamily == FilterFamily::kTwoSearches) {
    if (batch <= kOneCtaMaxRows) {
      return launch_sample_slices<kFamily, kLocalList, 1>(p, batch, bounds, device, smem_limit, stream);
    }
  }
  return launch_sample_slices<kFamily, kLocalList, kSliceCtasPerSm>(p, batch, bounds, device, smem_limit, stream);
}

// The row kernels of one filter family, with the gathering the family compiles
// (sampler_gather / renorm_gather). The top-k and two-search samplers list the top-k search's
// candidates in level 0 (kernel instances of their own, GatherMode::kHeadBound) unless a row
// stays in L1 between passes (below kRowBeyondL1Vocab, one CTA per SM). Measured against
// their bin and kept-set gathering (history/ab-sampling-head-list-draw-4e8583876.txt, graph
// us, A B A B): 128 x 128256 top-k 0.832-0.845x, joint 0.647-0.710x; 512 x 128256 top-k
// 0.696-0.706x, joint 0.585-0.620x; 512 x 32000 (two CTAs per SM) top-k 0.924-0.931x, joint
// 0.919-0.921x; but 128 x 32000 (its row in L1) top-k 1.038-1.053x, joint 1.040-1.051x.
// AOTINFER_SAMPLING_TOP_K_LIST=on lists in every such kernel (also rows in L1), for tests and
// A/B runs; unset or auto: the rule above.
bool top_k_list_pinned() { return env_choice("AOTINFER_SAMPLING_TOP_K_LIST", {"on", "auto"}) == "on"; }

// Threads of the top-p rejection row kernels. Rows below kRowBeyondL1Vocab take half of
// kRowThreads (two CTAs per SM) at any batch: with the row in L1 after round 0's pass, a
// CTA's barriers and dependent steps, not its loads, set the time, and 16 warps wait less at
// each than 32 (rejection pinned, graph us, A B A B: 512 against 1024 threads at 128 x 32000
// 25.8 / 27.3 against 27.3 / 28.7 flat / peaked, 512 x 32000 0.83x; at 128 x 128256 1.11x,
// so longer rows keep the other kernels' choice; history/ab-sampling-rejection-row-threads-
// f1f0427.txt). Four CTAs of 256 a SM (AOTINFER_SAMPLING_ROW_THREADS=256, an instance only
// this family has, for A/B runs) were slower than two of 512 at 128-512 x 32000 and 65536
// (1.00-1.29x; history/ab-sampling-rejection-rule-78eefca.txt). Longer rows take 512 threads
// once a batch holds more rows than the GPU has SMs (more than one wave of 1024-thread CTAs):
// with the binned test (round 0 reads the row once instead of twice), 512 against 1024 threads
// ran 0.91-0.93x at 192 x 65536, 0.85-0.94x at 256 x 65536, 0.96-0.99x / 0.91-0.95x at 192 /
// 256 x 128256, but 1.00x at 128 x 65536 and 1.08-1.10x at 128 x 128256 (history/ab-sampling-
// rejection-binned-threads-f9cf7cb.txt; the other kernels' rule, in row_threads, waits for
// two waves).
int rejection_row_threads(int device, std::int64_t rows, std::int64_t vocab, const char* op) {
  const int pinned = pinned_row_threads();
  if (pinned != 0) return pinned;
  return vocab < kRowBeyondL1Vocab || rows > multiprocessors(device, op) ? kRowThreads / 2 : kRowThreads;
}

// Whether the rejection row kernels test a round by round 0's bins before they read the row
// again (top_p_rejection.cuh, RejectionBins; the same tokens either way): yes, unless
// AOTINFER_SAMPLING_TOP_P_TEST=pass pins the exact test pass (tests and A/B runs). Measured
// against the pass (graph us, interleaved, two rounds; history/ab-sampling-rejection-binned-
// test-1f58369.txt): 128-512 rows x 32000 0.87-0.98x (the row in L1), 65536 0.77-0.95x, 128256
// 0.72-0.84x (512 x 128256 flat 204.7 -> 148.4, FlashInfer 185).
bool rejection_test_binned() {
  return env_choice("AOTINFER_SAMPLING_TOP_P_TEST", {"binned", "pass", "auto"}) != "pass";
}

template <int kThreads>
void launch_rejection_rows_of(const SampleParams& p, std::int64_t batch, bool binned, int device,
                              cudaStream_t stream, const char* op) {
  if (binned) {
    launch_row_kernel<sample_kernel<FilterFamily::kTopPRejectionBinned, kThreads>>(p, batch, kThreads, device, stream,
                                                                                   GatherMode::kOff, op);
  } else {
    launch_row_kernel<sample_kernel<FilterFamily::kTopPRejection, kThreads>>(p, batch, kThreads, device, stream,
                                                                             GatherMode::kOff, op);
  }
}

// (The 256-thread instance, for A/B runs only, has no binned twin.)
void launch_rejection_rows(const SampleParams& p, std::int64_t batch, int device, cudaStream_t stream,
                           const char* op) {
  const bool binned = rejection_test_binned();
  switch (rejection_row_threads(device, batch, p.vocab, op)) {
    case kRowThreads / 4:
      launch_row_kernel<sample_kernel<FilterFamily::kTopPRejection, kRowThreads / 4>>(
          p, batch, kRowThreads / 4, device, stream, GatherMode::kOff, op);
      break;
    case kRowThreads / 2: launch_rejection_rows_of<kRowThreads / 2>(p, batch, binned, device, stream, op); break;
    default: launch_rejection_rows_of<kRowThreads>(p, batch, binned, device, stream, op);
  }
  finish(cudaGetLastError(), op, device);
}

template <FilterFamily kFamily>
void launch_sample_rows(const SampleParams& p, std::int64_t batch, int device, cudaStream_t stream, const char* op) {
  constexpr bool kMayList = kFamily == FilterFamily::kTopK || kFamily == FilterFamily::kTwoSearches;
  if constexpr (kMayList) {
    const bool pinned = top_k_list_pinned();
    if (row_threads(device, batch, op) == kRowThreads / 2) {
      launch_row_kernel<sample_kernel<kFamily, kRowThreads / 2, true>>(p, batch, kRowThreads / 2, device, stream,
                                                                       GatherMode::kHeadBound, op);
    } else if (p.vocab >= kRowBeyondL1Vocab || pinned) {
      launch_row_kernel<sample_kernel<kFamily, kRowThreads, true>>(p, batch, kRowThreads, device, stream,
                                                                   GatherMode::kHeadBound, op);
    } else {
      launch_row_kernel<sample_kernel<kFamily>>(p, batch, kRowThreads, device, stream, sampler_gather(kFamily), op);
    }
    finish(cudaGetLastError(), op, device);
  } else {
    launch_rows<sample_kernel<kFamily>, sample_kernel<kFamily, kRowThreads / 2>>(p, batch, device, stream,
                                                                                 sampler_gather(kFamily), op);
  }
}

// Renormalisation gathers (top-p only: renorm_gather) from rows beyond L1's reach: at vocab
// 32000 (a row stays in L1 between passes) the gather pass cost more than the level-1 pass it
// replaced (peaked rows 1.05-1.06x); at 128256 it saved 2-6% (history/sampling-*-gather-*.md).
template <typename T, FilterFamily kFamily>
void launch_renorm_rows(const RowFilterParams<T>& p, int device, cudaStream_t stream, const char* op) {
  const GatherMode gather = p.vocab >= kRowBeyondL1Vocab ? renorm_gather(kFamily) : GatherMode::kOff;
  launch_rows<row_filter_kernel<T, false, kRowThreads, kFamily>, row_filter_kernel<T, false, kRowThreads / 2, kFamily>>(
      p, p.rows, device, stream, gather, op);
}

// Top-k masking (kMask) and top-k renormalisation. Where rows are beyond L1, level 0 lists the
// search's candidates and the output pass writes the kept set from that list
// (head_bound_list.cuh; kernel instances of their own, since the listing code's registers
// slowed the shared kernel by 1.01-1.05x at vocab 32000 where no list ran, 633e77d).
// Measured (dev/ab_provider_builds.sh, graph us): with the list for levels 1-2 only, in the
// two-CTA-per-SM kernels (history/ab-sampling-head-list-633e77d.txt), 512 x 128256 mask
// 0.872x / 0.919x (flat / peaked), renorm 0.899x / 0.959x, but 128 x 128256 (1024-thread
// kernels) 0.993x-1.097x; with the output pass from the list too, in both kernel sizes
// (history/ab-sampling-scatter-output-6b4c747.txt), 128 x 128256 mask 0.815x / 0.854x, renorm
// 0.858x / 0.900x, and 512 x 128256 mask 0.809x / 0.811x, renorm 0.838x / 0.836x.
template <typename T, bool kMask, FilterFamily kFamily>
void launch_top_k_rows(const RowFilterParams<T>& p, int device, cudaStream_t stream, const char* op) {
  if (p.vocab >= kRowBeyondL1Vocab) {
    launch_rows<row_filter_kernel<T, kMask, kRowThreads, kFamily, true>,
                row_filter_kernel<T, kMask, kRowThreads / 2, kFamily, true>>(p, p.rows, device, stream,
                                                                             GatherMode::kHeadBound, op);
  } else {
    launch_rows<row_filter_kernel<T, kMask, kRowThreads, kFamily>,
                row_filter_kernel<T, kMask, kRowThreads / 2, kFamily>>(p, p.rows, device, stream, GatherMode::kOff, op);
  }
}

// top_p_renorm_probs reads any float dtype as float32 (API.md), as the sampling kernels do, so
// top-p renorm is built for float32 alone; launch_renorm refuses other probs before either path.
[[noreturn]] void refuse_top_p_probs(DType dtype) {
  fail_argument(std::string("renorm: top-p probs must be float32, got ") + dtype_name(dtype));
}

template <typename T>
void run_row_filter(bool mask, const TensorView& input, const TensorView& out, const FilterParams& f,
                    cudaStream_t stream) {
  RowFilterParams<T> p;
  p.input = input.ptr<const T>();
  p.out = out.ptr<T>();
  p.rows = input.size(0);
  p.vocab = input.size(1);
  p.in_row_stride = input.stride(0);
  p.out_row_stride = out.stride(0);
  p.filter = f;
  p.gather = GatherSizes{0, 0};  // set per launch (launch_row_kernel)
  if (p.rows == 0 || p.vocab == 0) return;
  const char* op = mask ? "top_k_mask_logits" : "renorm";
  DeviceGuard guard(input.device);
  finish(guard.status(), op, input.device);
  const RowFilterKind kind = mask                          ? RowFilterKind::kMask
                             : f.mode == FilterMode::kTopP ? RowFilterKind::kTopPRenorm
                                                           : RowFilterKind::kTopKRenorm;
  if (use_slice_kernels(input.device, p.rows, p.vocab, op, row_filter_max_cluster_rows(p.vocab, kind))) {
    constexpr SliceBounds kBounds = kSearchBounds;  // every row filter searches cluster-wide
    const int smem = shared_memory_limit(input.device, op);
    finish(mask ? launch_slices<row_filter_slice_kernel<T, true, kNarrowSliceCtas>, row_filter_slice_kernel<T, true, kSliceCtas>,
                                row_filter_slice_kernel<T, true, kWideSliceCtas>>(p, p.rows, p.vocab, kBounds, input.device,
                                                                                  smem, stream)
                : launch_slices<row_filter_slice_kernel<T, false, kNarrowSliceCtas>,
                                row_filter_slice_kernel<T, false, kSliceCtas>,
                                row_filter_slice_kernel<T, false, kWideSliceCtas>>(p, p.rows, p.vocab, kBounds, input.device,
                                                                                   smem, stream),
           op, input.device);
    return;
  }
  if (mask) {
    launch_top_k_rows<T, true, FilterFamily::kOneSearch>(p, input.device, stream, op);
  } else {
    // Top-p renorm gathers (its search mostly runs all three levels); a top-k search mostly
    // stops after level 1, which the gather pass would only replace, at a higher cost.
    if (f.mode == FilterMode::kTopP) {
      // The 2-byte types build no top-p row kernels (refuse_top_p_probs; 4 instances, ~5% of
      // this file's sm_90a SASS).
      if constexpr (std::is_same_v<T, float>) {
        launch_renorm_rows<T, FilterFamily::kTopP>(p, input.device, stream, op);
      } else {
        refuse_top_p_probs(input.dtype);
      }
    } else {
      launch_top_k_rows<T, false, FilterFamily::kTopK>(p, input.device, stream, op);
    }
  }
}

template <typename F>
void dispatch_float(DType dtype, const char* op, const char* name, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat16: f(__half{}); return;
    case DType::kBFloat16: f(__nv_bfloat16{}); return;
    default:
      fail_argument(std::string(op) + ": " + name + " must be float32, float16 or bfloat16, got " +
                    dtype_name(dtype));
  }
}

// How the top-p sampler draws (top_p_rejection.cuh): by rejection at every shape (since
// session 41), the threshold search's inverse CDF only where AOTINFER_SAMPLING_TOP_P=threshold
// pins it. Which one runs is part of the contract, since the two draw different tokens for a
// seed: the reference's sample_from_probs draws by rejection too unless told otherwise. The
// history (graph us, threshold -> rejection, A B A B in one build): the cluster kernels at 1
// and 16 rows 0.44-0.90x (1 x 128256 flat 26.6 -> 11.6; history/ab-sampling-top-p-rejection-
// d6b442d.txt), at 32 and 64 rows 0.52-0.83x (ab-sampling-top-p-rejection-32-64-rows-
// 0d3ea36.txt); the row kernels, whose test read the row again a round, lost at 128 rows and
// on rows beyond L1 (session 39-40: 128 x 128256 peaked 1.34x, 512 x 128256 peaked 1.11x;
// ab-sampling-rejection-rule-78eefca.txt), so those shapes kept the search until the binned
// test (rejection_test_binned): then rejection took 0.59-0.92x the search's time at 128-512 x
// 32000-128256, but 1.02x / 1.15x / 1.11x at 128 rows of 32000 / 65536 / 128256 peaked
// (history/ab-sampling-rejection-binned-test-1f58369.txt), where it still beats FlashInfer
// (128 x 128256 peaked 66.7 against its 80.5). One rule for every shape, not a batch bound
// for those three: a shape cannot tell flat rows (where rejection wins at 128 rows too) from
// peaked ones.
bool top_p_draws_by_rejection() {
  return env_choice("AOTINFER_SAMPLING_TOP_P", {"rejection", "threshold", "auto"}) != "threshold";
}

}  // namespace

void launch_sample(const TensorView& input, bool input_is_logits, const TensorView* indices,
                   const TensorView& samples, const TensorView* valid, const FilterArgs& filter,
                   const RandomArgs& random, std::uintptr_t stream) {
  const char* op = "sampling";
  check_matrix(input, op, "probs");
  check_row_length(input, op, "probs");
  check_dtype(input, DType::kFloat32, op, "probs");
  const std::int64_t rows = input.size(0);
  check_rank(samples, 1, op, "samples");
  const std::int64_t batch = samples.size(0);
  if (!is_index_dtype(samples.dtype)) fail_argument("sampling: samples must be int32 or int64");
  if (indices) {
    check_rank(*indices, 1, op, "indices");
    if (!is_index_dtype(indices->dtype)) fail_argument("sampling: indices must be int32 or int64");
    check_length(*indices, batch, op, "indices");
    check_same_device(*indices, input, op, "indices");
    if (batch > 1 && indices->stride(0) != 1) fail_argument("sampling: indices must be contiguous");
  } else if (batch != rows) {
    fail_argument("sampling: without indices, samples must have one entry per row");
  }
  if (batch > 1 && samples.stride(0) != 1) fail_argument("sampling: samples must be contiguous");
  check_same_device(samples, input, op, "samples");
  if (valid) {
    check_rank(*valid, 1, op, "valid");
    check_dtype(*valid, DType::kBool, op, "valid");
    check_length(*valid, batch, op, "valid");
    check_same_device(*valid, input, op, "valid");
  }
  if (input_is_logits && filter.mode != FilterMode::kNone) fail_argument("sampling: logits take no filter");
  SampleParams p;
  p.input = input.ptr<const float>();
  p.rows = rows;
  p.vocab = input.size(1);
  p.row_stride = input.stride(0);
  p.indices = indices ? reinterpret_cast<const void*>(indices->data) : nullptr;
  p.indices_int64 = indices && indices->dtype == DType::kInt64;
  p.batch = batch;
  p.samples = reinterpret_cast<void*>(samples.data);
  p.samples_int64 = samples.dtype == DType::kInt64;
  p.valid = valid ? valid->ptr<bool>() : nullptr;
  p.input_is_logits = input_is_logits;
  p.filter = filter_params(filter, rows, input, op);
  p.random = random_params(random, batch, input, op);
  p.gather = GatherSizes{0, 0};  // set per launch (launch_row_kernel)
  if (batch == 0) return;
  DeviceGuard guard(input.device);
  finish(guard.status(), op, input.device);
  const bool two_searches = filter.mode == FilterMode::kTopKThenTopP || filter.mode == FilterMode::kJoint;
  // Plain sampling from probabilities is top-p by rejection's round 0 with p = 1: one pass that
  // sums the masses in the fixed unit while it finds the row's largest key, where the
  // kNoSearch draw read the row for its largest key and then again for the masses in that
  // key's unit (reference "Drawing": an unfiltered row takes the fixed unit where it holds).
  const bool plain = filter.mode == FilterMode::kNone && !input_is_logits;
  if (plain) p.filter = FilterParams{FilterMode::kTopP, nullptr, 0, nullptr, 1.f, nullptr, 0.f};
  // Its own kernel instances, so that the searching kernels carry none of its code.
  const bool rejection =
      plain || (filter.mode == FilterMode::kTopP && !input_is_logits && top_p_draws_by_rejection());
  const auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  const std::int64_t max_cluster_rows = sampler_max_cluster_rows(filter.mode, plain, p.vocab);
  if (!input_is_logits && use_slice_kernels(input.device, batch, p.vocab, op, max_cluster_rows)) {
    // Each CTA lists its own top k into rank 0 in one exchange (cluster_local_top_k.cuh): for
    // top-k and for the two-search filters, at any batch, where the slice fits beside the list
    // kernels' static shared memory. At one row joint ran 0.90x against the cluster-wide
    // searches once each CTA's list bound stopped early (history/ab-sampling-local-bound-one-
    // row-164b10a2b.txt; 1.01-1.04x before, when one row kept the cluster-wide searches).
    // (The clusters of 8's check: a wide cluster's slice is half as large and its list 8 KB
    // larger, so it fits wherever this does; clusters of 4 check theirs in narrow_slices_fit.)
    const int smem = shared_memory_limit(input.device, op);
    const bool local_list = (filter.mode == FilterMode::kTopK || two_searches) && p.vocab < kLocalTopKMaxVocab &&
                            slice_fits(p.vocab, kSliceCtas, local_list_static_smem(kSliceCtas), smem);
    // Min-p searches nothing; the others without the lists search cluster-wide, but top-p by
    // rejection (and plain sampling with it), which has bounds of its own.
    const bool searches = !local_list && filter.mode != FilterMode::kNone && filter.mode != FilterMode::kMinP;
    const SliceBounds bounds = local_list ? kListBounds
                               : rejection ? kRejectionBounds
                               : searches  ? kSearchBounds
                                           : kDrawBounds;
    const int dev = input.device;
    cudaError_t err;
    constexpr FilterFamily kTwo = FilterFamily::kTwoSearches, kOne = FilterFamily::kOneSearch;
    if (local_list) {
      err = two_searches ? launch_slice_samplers<kTwo, true>(p, batch, bounds, dev, smem, cuda_stream)
                         : launch_slice_samplers<kOne, true>(p, batch, bounds, dev, smem, cuda_stream);
    } else if (rejection) {
      err = launch_slice_samplers<FilterFamily::kTopPRejection>(p, batch, bounds, dev, smem, cuda_stream);
    } else if (two_searches) {
      err = launch_slice_samplers<kTwo>(p, batch, bounds, dev, smem, cuda_stream);
    } else if (!searches) {
      // Min-p: kernel instances of its own, with no search compiled in (as the row kernels'
      // kNoSearch). Measured while plain sampling drew here too, against the searching
      // instance, whose registers the searches' exchanges changed (it spills 28 B in clusters
      // of 16; session 62: min-p and plain 1.035-1.046x at 1 x 128256,
      // history/ab-sampling-adopt-exchanges-e56e028-h100.txt):
      // 0.947-0.959x at 1 x 128256, 0.96-0.98x at 1-16 x 32000, 0.98-0.99x at 64 x 32000, but
      // 1.00-1.01x at 16-64 x 128256 (H100, A B A B in one machine start, the same tokens;
      // history/ab-sampling-slice-no-search-0848364-h100.txt).
      err = launch_slice_samplers<FilterFamily::kNoSearch>(p, batch, bounds, dev, smem, cuda_stream);
    } else {
      err = launch_slice_samplers<kOne>(p, batch, bounds, dev, smem, cuda_stream);
    }
    finish(err, op, input.device);
    return;
  }
  // One kernel instance per filter family (FilterFamily: only its searches are compiled). The
  // top-k and top-p samplers gather with the draw's segments (their row is read twice). The
  // two-search filters gained nothing from gathering (their top-p search runs inside the small
  // top-k set and mostly stops after level 1) and were measured 1.04-1.16x slower with it.
  switch (input_is_logits ? FilterMode::kNone : p.filter.mode) {
    case FilterMode::kTopK: launch_sample_rows<FilterFamily::kTopK>(p, batch, input.device, cuda_stream, op); break;
    case FilterMode::kTopP:
      if (rejection) {
        launch_rejection_rows(p, batch, input.device, cuda_stream, op);
      } else {
        launch_sample_rows<FilterFamily::kTopP>(p, batch, input.device, cuda_stream, op);
      }
      break;
    case FilterMode::kTopKThenTopP:
    case FilterMode::kJoint:
      launch_sample_rows<FilterFamily::kTwoSearches>(p, batch, input.device, cuda_stream, op);
      break;
    default:  // Gumbel-max from logits, min-p
      launch_sample_rows<FilterFamily::kNoSearch>(p, batch, input.device, cuda_stream, op);
  }
}

void launch_renorm(const TensorView& input, const TensorView& out, const FilterArgs& filter,
                   std::uintptr_t stream) {
  const char* op = "renorm";
  check_matrix(input, op, "probs");
  check_row_length(input, op, "probs");
  check_matrix(out, op, "out");
  check_same_shape(out, input, op, "out", "probs");
  if (out.dtype != input.dtype) fail_argument("renorm: out must have the dtype of probs");
  check_same_device(out, input, op, "out");
  if (filter.mode != FilterMode::kTopK && filter.mode != FilterMode::kTopP) {
    fail_argument("renorm: filter must be top-k or top-p");
  }
  if (filter.mode == FilterMode::kTopP && input.dtype != DType::kFloat32) refuse_top_p_probs(input.dtype);
  const FilterParams f = filter_params(filter, input.size(0), input, op);
  dispatch_float(input.dtype, op, "probs", [&](auto tag) {
    run_row_filter<decltype(tag)>(false, input, out, f, reinterpret_cast<cudaStream_t>(stream));
  });
}

void launch_top_k_mask(const TensorView& logits, const TensorView& out, const FilterArgs& filter,
                       std::uintptr_t stream) {
  const char* op = "top_k_mask_logits";
  check_matrix(logits, op, "logits");
  check_row_length(logits, op, "logits");
  check_matrix(out, op, "out");
  check_same_shape(out, logits, op, "out", "logits");
  if (out.dtype != logits.dtype) fail_argument("top_k_mask_logits: out must have the dtype of logits");
  check_same_device(out, logits, op, "out");
  FilterArgs f = filter;
  f.mode = FilterMode::kTopK;
  const FilterParams fp = filter_params(f, logits.size(0), logits, op);
  dispatch_float(logits.dtype, op, "logits", [&](auto tag) {
    run_row_filter<decltype(tag)>(true, logits, out, fp, reinterpret_cast<cudaStream_t>(stream));
  });
}

void launch_top_k_select(const TensorView& input, std::int64_t k, const TensorView& values,
                         const TensorView& indices, std::uintptr_t stream) {
  const char* op = "top_k";
  check_matrix(input, op, "input");
  check_row_length(input, op, "input");
  if (k < 1 || k > input.size(1)) {
    fail_argument("top_k: k must be in [1, " + std::to_string(input.size(1)) + "], got " + std::to_string(k));
  }
  check_rank(values, 2, op, "values");
  check_rank(indices, 2, op, "indices");
  check_dtype(indices, DType::kInt64, op, "indices");
  if (values.dtype != input.dtype) fail_argument("top_k: values must have the dtype of input");
  for (const TensorView* v : {&values, &indices}) {
    if (v->size(0) != input.size(0) || v->size(1) != k || v->stride(1) != 1 || v->stride(0) != k) {
      fail_argument("top_k: values and indices must be contiguous (rows, k)");
    }
    check_same_device(*v, input, op, "output");
  }
  if (input.size(0) == 0) return;
  DeviceGuard guard(input.device);
  finish(guard.status(), op, input.device);
  dispatch_float(input.dtype, op, "input", [&](auto tag) {
    using T = decltype(tag);
    TopKSelectParams<T> p{input.ptr<const T>(), input.size(0), input.size(1), input.stride(0), k,
                          values.ptr<T>(), indices.ptr<std::int64_t>()};
    top_k_select_kernel<T><<<static_cast<unsigned>(p.rows), kRowThreads, 0,
                             reinterpret_cast<cudaStream_t>(stream)>>>(p);
  });
  finish(cudaGetLastError(), op, input.device);
}

void launch_chain_speculative(const TensorView& draft_probs, const TensorView& draft_ids,
                              const TensorView& target_probs, const TensorView& out_ids,
                              const TensorView& accepted, const TensorView& emitted,
                              const RandomArgs& random, std::uintptr_t stream) {
  const char* op = "chain_speculative_sampling";
  check_rank(draft_probs, 3, op, "draft_probs");
  check_rank(target_probs, 3, op, "target_probs");
  check_rank(draft_ids, 2, op, "draft_token_ids");
  check_dtype(draft_probs, DType::kFloat32, op, "draft_probs");
  check_dtype(target_probs, DType::kFloat32, op, "target_probs");
  if (!is_index_dtype(draft_ids.dtype)) fail_argument("chain_speculative_sampling: draft_token_ids must be int32 or int64");
  const std::int64_t B = draft_probs.size(0), n = draft_probs.size(1), V = draft_probs.size(2);
  if (target_probs.size(0) != B || target_probs.size(1) != n + 1 || target_probs.size(2) != V ||
      draft_ids.size(0) != B || draft_ids.size(1) != n) {
    fail_argument("chain_speculative_sampling: shapes must be draft_probs (B, n, V), draft_token_ids (B, n), "
                  "target_probs (B, n+1, V)");
  }
  // n = 0 (no drafts: the kernel draws the bonus token alone) leaves draft_probs and
  // draft_token_ids empty and never read, with whatever strides torch gave them.
  const auto contiguous3 = [](const TensorView& v) {
    return v.size(1) == 0 ||
           (v.stride(2) == 1 && v.stride(1) == v.size(2) && v.stride(0) == v.size(1) * v.size(2));
  };
  if (!contiguous3(draft_probs) || !contiguous3(target_probs) ||
      (n > 0 && (draft_ids.stride(1) != 1 || draft_ids.stride(0) != n))) {
    fail_argument("chain_speculative_sampling: inputs must be contiguous");
  }
  check_rank(out_ids, 2, op, "output_token_ids");
  check_dtype(out_ids, DType::kInt32, op, "output_token_ids");
  if (out_ids.size(0) != B || out_ids.size(1) != n + 1 || out_ids.stride(1) != 1 || out_ids.stride(0) != n + 1) {
    fail_argument("chain_speculative_sampling: output_token_ids must be contiguous (B, n+1)");
  }
  for (const TensorView* v : {&accepted, &emitted}) {
    check_rank(*v, 1, op, "counters");
    check_dtype(*v, DType::kInt32, op, "counters");
    check_length(*v, B, op, "counters");
    if (B > 1 && v->stride(0) != 1) fail_argument("chain_speculative_sampling: counters must be contiguous");
    check_same_device(*v, draft_probs, op, "counters");
  }
  for (const TensorView* v : {&draft_ids, &target_probs, &out_ids}) check_same_device(*v, draft_probs, op, "input");
  ChainSpeculativeParams p;
  p.draft_probs = draft_probs.ptr<const float>();
  p.draft_ids = reinterpret_cast<const void*>(draft_ids.data);
  p.draft_ids_int64 = draft_ids.dtype == DType::kInt64;
  p.target_probs = target_probs.ptr<const float>();
  p.out_ids = out_ids.ptr<std::int32_t>();
  p.accepted = accepted.ptr<std::int32_t>();
  p.emitted = emitted.ptr<std::int32_t>();
  p.batch = B;
  p.n = n;
  p.vocab = V;
  p.random = random_params(random, B, draft_probs, op);
  if (B == 0 || V == 0) return;
  DeviceGuard guard(draft_probs.device);
  finish(guard.status(), op, draft_probs.device);
  chain_speculative_kernel<<<static_cast<unsigned>(B), kRowThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(p);
  finish(cudaGetLastError(), op, draft_probs.device);
}

}  // namespace aotinfer::sampling
