// The row kernels of filter_sample.cuh with each row split over a cluster of 4, 8 or 16 CTAs
// (sm_90+; row_scope.cuh's SliceScopeOf): every CTA copies its slice of
// the row into shared memory once, and the statistics, the radix levels and the draw then
// read shared memory instead of global memory, one pass each. Same results as the
// one-CTA-per-row kernels: the same keys and integer histograms, and the same token (the
// inverse CDF's integer masses add up to the same prefix sums whichever CTA holds which slice).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "filter_sample.cuh"
#include "row_scope.cuh"
#include "cluster_local_top_k.cuh"

namespace aotinfer::sampling {
namespace detail {

// This CTA's part of a row of n elements: groups [first, first + count).
struct SliceRange {
  std::int64_t first, count;
};

__device__ __forceinline__ SliceRange slice_range(std::int64_t n, std::int64_t slice_groups, int rank) {
  const std::int64_t total = (n + 3) / 4, first = rank * slice_groups;
  std::int64_t count = total - first;
  count = count < 0 ? 0 : (count > slice_groups ? slice_groups : count);
  return SliceRange{first, count};
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Copies the slice of row x into shared memory as floats (NaN past the row's end), group g by
// the thread that SharedGroups' passes give it. The closing barrier_wait orders none of the
// copy's stores: a thread's first pass over the slice may read the groups it stored itself,
// others' only after a block barrier (every kernel's first pass reads its own; dev/NOTES.md
// item 89). Around the copy, one phase of the cluster barrier: a CTA may write into a peer's
// shared memory only once the peer is known to be running (and its push barriers, which
// cluster_push.cuh's fence.mbarrier_init publishes, initialised), and the pushes of
// SliceScopeOf::reduce() come before it waits for anything, so a kernel
// whose first collective is a reduce() (top-p by rejection's largest key, plain and min-p
// sampling's largest_key) would otherwise push into peers not yet known to have started. Every
// CTA arrives before its loads, so the wait after them rarely waits. Against no phase
// (reduce() pushing first): 1.005-1.029x the time at 1 and 16 x 32000, 0.97-1.015x at 128256
// (history/ab-sampling-load-slice-phase-ec5f1b3.txt). The arrive is relaxed
// (announce_push_barriers says why). (A search's level 0 still takes a cluster barrier, for its
// shares: SliceScopeOf::level_start.)
// With kCountLevel0 (the list kernels), it also counts the slice's keys into sh's level-0
// bins for level0_count_bound (whose comment has the measurement), clearing them first.
template <int kCtas, bool kCountLevel0, typename T, typename Sh>
__device__ SliceScopeOf<kCtas> load_slice(float4* dst, const T* x, std::int64_t n, SliceRange r, Sh& sh) {
  if constexpr (kCountLevel0) {
    clear_level0_counts(sh);
    __syncthreads();
  }
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  announce_push_barriers();  // (cluster_push.cuh: SliceScopeOf's exchanges complete on them)
  // A 64 KB slice is 8 groups per thread: all eight loads in flight at once (one at a time,
  // the copy alone cost ~8 DRAM latencies, the bulk of a batch-1 call).
  for_each_group4<8>(x, n, r.first, r.count, group_aligned(x), NAN, [&](std::int64_t g, const float(&v)[4]) {
    dst[g - r.first] = make_float4(v[0], v[1], v[2], v[3]);
    if constexpr (kCountLevel0) count_level0_group(sh, v);
  });
  cluster.barrier_wait();  // (not a block barrier for the stores above: see the comment)
  return SliceScopeOf<kCtas>{{dst, r.count, r.first}};
}
#endif

}  // namespace detail

// Two CTAs a SM (for batches of up to two waves of clusters) cap a thread at 64 registers, and
// the list kernels spill under it (joint in clusters of 8: 36 B stored, 8 B loaded a thread).
// One CTA a SM for every slice kernel (up to 128 registers, no spills; lab
// AOTINFER_LAB_SLICE_ONE_CTA_A_SM, session 53, history/ab-sampling-slice-one-cta-a-sm-3ebd2d9-
// h100.txt) ran joint 0.97x at 1 x 32000 and 0.98-0.99x at 1 x 128256, but every sampler
// 1.16-1.40x at 16 x 128256: 16 clusters of 8 no longer fit the GPCs at once. So only the
// two-search list kernels (joint, top-k then top-p) have instances at one CTA a SM (kCtasPerSm
// = 1), which sample_launch.cu launches for up to kOneCtaMaxRows = 4 rows (at most 4 clusters in
// flight; at one CTA a SM a GPC holds one cluster of 16, two of 8 or four of 4). H200 A/B, A B A
// B in one machine start, the same tokens (history/ab-sampling-few-rows-one-cta-c15ea54.txt):
// joint 0.964-0.985x at 1 and 4 rows but sharp rows of 32000 (0.998-1.002x), top-k then top-p
// 0.977-0.997x there; at 16 rows (two CTAs a SM still, but the shared noinline callees compile
// otherwise) 0.986-1.007x.
constexpr int kSliceCtasPerSm = 2;

// sample_kernel for probabilities, one cluster of kCtas CTAs per output row. kFamily:
// kOneSearch, kNoSearch (min-p and plain), kTwoSearches or kTopPRejection. kLocalList (rows
// below kLocalTopKMaxVocab; top-k mode, or with kTwoSearches top-k then top-p and joint):
// cluster_local_top_k.cuh's draw, an instance of its own. kCtasPerSm: the occupancy its
// registers are capped for (see above).
template <FilterFamily kFamily, bool kLocalList, int kCtas, int kCtasPerSm = kSliceCtasPerSm>
__global__ void __launch_bounds__(kSliceThreads, kCtasPerSm)
    sample_slice_kernel(const __grid_constant__ SampleParams p, std::int64_t slice_groups) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 slice_smem[];
  __shared__ SliceRadixSharedOf<kCtas> sh;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const std::int64_t b = blockIdx.x / kCtas;
  pdl_wait_for_prior_grid();
  LAB_SLICE(lab_slice_start());
  const std::int64_t row = detail::source_row(p.indices, p.indices_int64, b);
  std::int64_t token = -1;
  if (row >= 0 && row < p.rows) {  // the same for the whole cluster
    const std::int64_t n = p.vocab;
    const SliceScopeOf<kCtas> scope = detail::load_slice<kCtas, kLocalList>(
        slice_smem, p.input + row * p.row_stride, n, detail::slice_range(n, slice_groups, rank), sh);
    LAB_SLICE(lab_slice_mark(1));
    if constexpr (kLocalList) {
      token = detail::local_list_draw<kFamily == FilterFamily::kTwoSearches>(
          scope, p.input + row * p.row_stride, n, p.filter, row, p.random.for_row(b, 0), sh);
    } else {
      token = detail::family_draw<kFamily>(scope, n, p.filter, row, p.random.for_row(b, 0), sh);
    }
  }
  pdl_launch_dependents();
  // The CTA holding the token writes it (-2 elsewhere); rank 0 reports a row with none.
  if (threadIdx.x == 0 && (token >= 0 || (token == -1 && rank == 0))) detail::write_sample(p, b, token);
  LAB_SLICE(lab_slice_print(static_cast<int>(kFamily), kCtasPerSm, rank));
  // No barrier before exiting: every access to a peer's shared memory is a push that the peer
  // waits for (cluster_push.cuh), so no push into this CTA is pending when it leaves.
#endif
}

// row_filter_kernel of filter_sample.cuh (renorm, or top-k mask with kMask), one cluster of
// kCtas CTAs per row.
template <typename T, bool kMask, int kCtas>
__global__ void __launch_bounds__(kSliceThreads, kSliceCtasPerSm)
    row_filter_slice_kernel(const __grid_constant__ RowFilterParams<T> p, std::int64_t slice_groups) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 slice_smem[];
  __shared__ SliceRadixSharedOf<kCtas> sh;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const std::int64_t row = blockIdx.x / kCtas;
  pdl_wait_for_prior_grid();
  const std::int64_t n = p.vocab;
  const detail::SliceRange range = detail::slice_range(n, slice_groups, rank);
  const SliceScopeOf<kCtas> scope =
      detail::load_slice<kCtas, false>(slice_smem, p.input + row * p.in_row_stride, n, range, sh);
  T* y = p.out + row * p.out_row_stride;
  const bool out_aligned = group_aligned(y);
  if constexpr (kMask) {
    const std::uint32_t min_key = detail::top_k_logit_key(scope, n, p.filter, row, sh);
    scope.for_each_group(0.f, [&](std::int64_t g, const float (&in)[4]) {
      float v[4] = {in[0], in[1], in[2], in[3]};
      detail::mask_group(v, min_key);
      store_group4(y, n, g, out_aligned, v);
    });
  } else {
    const detail::KeptSet kept = detail::prob_filter(scope, n, p.filter, row, true, sh);
    const float factor = detail::renorm_factor(kept);
    scope.for_each_group(0.f, [&](std::int64_t g, const float (&in)[4]) {
      float v[4] = {in[0], in[1], in[2], in[3]};
      detail::renorm_group(v, kept, factor);
      store_group4(y, n, g, out_aligned, v);
    });
  }
  pdl_launch_dependents();
  // No barrier before exiting (as in sample_slice_kernel).
#endif
}

}  // namespace aotinfer::sampling
