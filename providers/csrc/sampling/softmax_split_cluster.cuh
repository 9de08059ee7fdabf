// The split softmax in one launch: a row's chunks are one thread-block cluster (sm_90+).
//
// Why: the split pair (softmax_split.cuh) reads every chunk twice, once per kernel, and its
// stats kernel only reads: at 128 x 128256 it moved 32.8 MB in 15.8 us (2.1 TB/s, Nsight
// Compute at ca62d3f) while the write kernel waited, and its second copy of the logits hits L2
// only in part. Here each CTA copies its chunk into shared memory once (copy_chunk_to_shared),
// takes its (max, sum) pair (chunk_stats), and the row's CTAs, one cluster, push their pairs
// into each other's shared memory before each writes its chunk's probabilities from
// the copy it already holds. DRAM sees the logits once and the probabilities once, and the
// CTAs of later clusters read while earlier ones write.
//
// A cluster holds at most kMaxClusterChunks CTAs, the portable cluster size, so this runs only
// where a row has at most that many chunks (split_cluster_chunk_elems); the launcher
// (softmax_launch.cu) decides where it runs and sends everything else to the pair. Clusters
// of 16 (non-portable) ran slower: 128 x 128256 in 16 chunks of 16 KB took 38.5 us against
// 33.3 in 8 of 32 KB (benchmarks/results/history/sweep-softmax-3fd4926.txt).
// Numerics are the split pair's: same pairs, same merge, same write.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../common/cuda_check.h"
#include "../common/launch_cache.h"
#include "../common/pdl.cuh"
#include "cluster_push.cuh"
#include "softmax_split.cuh"

namespace aotinfer::sampling {

constexpr int kMaxClusterChunks = 8;

// Chunk length of the cluster form in elements: pinned_kb KB when nonzero, else the pair's
// largest chunk (kSplitMaxChunkBytes), grown to a multiple of kSplitMinChunk where a row would
// have more than kMaxClusterChunks chunks; 0 where that takes more than kSplitMaxChunkBytes.
// The largest chunk, not the pair's rule (split_softmax_chunk_elems): at 3fd4926 it was as
// fast or faster at every shape swept, e.g. 128 x 32000 11.2 us in 32 KB chunks against 13.8
// in the rule's 16 KB, 256 x 32000 19.3 against 18.7 the one exception
// (history/sweep-softmax-3fd4926.txt).
inline int split_cluster_chunk_elems(std::int64_t vocab, int elem_bytes, int pinned_kb) {
  std::int64_t chunk = (pinned_kb != 0 ? pinned_kb * 1024 : kSplitMaxChunkBytes) / elem_bytes;
  if ((vocab + chunk - 1) / chunk > kMaxClusterChunks) {
    chunk = ((vocab + kMaxClusterChunks - 1) / kMaxClusterChunks + kSplitMinChunk - 1) / kSplitMinChunk *
            kSplitMinChunk;
  }
  return chunk * elem_bytes <= kSplitMaxChunkBytes ? static_cast<int>(chunk) : 0;
}

// The register form (2-byte logits whose rows start 8-byte aligned, fp32 output rows 16-byte
// aligned; softmax_split_cluster checks): each thread keeps the first
// kRegisterGroups groups of four of its chunk (3072 elements a CTA) in registers, loaded while
// the bulk copy brings the rest into shared memory (26.6 KB instead of 32 KB a CTA), at most 32
// registers a thread, so that 8 CTAs fit an SM instead of 6. Built as a lab to put 128 rows of
// 128256 (1024 CTAs) in one wave (dev/NOTES.md items 99-100); what an H100 sweep then showed
// (benchmarks/results/history/sweep-softmax-forms-f36d737-h100.txt, both forms in one process,
// per call in a graph) is a rule by CTAs an SM, with sharp edges at 4 and 8: from 3.6 to 4.0
// CTAs an SM the register form took 0.87-0.88x the time at vocab 32000 (256 x 32000 21.0 ->
// 18.3 us) and 0.90-0.98x at 128256, from 7.3 to 8.0 0.93-0.99x (512 x 32000 37.2 -> 35.4,
// 128 x 128256 37.2 -> 36.9); at 4.1-6.8 it ran 1.01-1.11x slower, at 2.9 and from 8.2 on
// 0.99-1.01x. Why the edges fall at exactly 4 and 8 (half and all of its 8 CTAs an SM) is not
// known; the plain form with the same maximum shared carveout ran as the plain form, so the
// carveout is not it. register_form_serves keeps the form to the two windows measured.
constexpr int kRegisterGroups = 3;
constexpr int kRegisterElems = kRegisterGroups * 4 * kSplitThreads;
// The CTAs an SM the form is built for: 8 where an SM runs 2048 threads (sm_90, sm_100); 6 on
// the 1536-thread SMs of sm_110 and sm_120, where auto does not take it (register_form_serves'
// windows were measured at 8; there it is a pinned alternative only).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1100
constexpr int kRegisterFormCtasPerSm = 6;
#else
constexpr int kRegisterFormCtasPerSm = 8;
#endif

// Whether auto takes the register form for a grid of `ctas` CTAs on `sms` SMs of
// `threads_per_sm` threads: more than 3.5 and at most 4, or more than 7 and at most 8 CTAs an
// SM (above), on SMs that hold 8 of its CTAs.
inline bool register_form_serves(std::int64_t ctas, int sms, int threads_per_sm) {
  const std::int64_t n = sms;
  return threads_per_sm >= 8 * kSplitThreads &&
         ((2 * ctas > 7 * n && ctas <= 4 * n) || (ctas > 7 * n && ctas <= 8 * n));
}

// The chunk's first `elems` elements (a multiple of 4), group g of them in thread g % kSplitThreads.
template <typename T, int kGroups>
struct RegisterGroups {
  Group4<T> q[kGroups > 0 ? kGroups : 1];
  int elems;

  // f(k, v, count) over this thread's groups, as for_each_shared_group4.
  template <typename F>
  __device__ __forceinline__ void operator()(F&& f) const {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int g = static_cast<int>(threadIdx.x) + i * kSplitThreads;
      if (4 * g < elems) {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = load_float(&q[i].v[j]);
        f(4 * g, v, std::integral_constant<int, 4>{});
      }
    }
  }
};

// src's first min(n, kGroups * 4 * kSplitThreads) elements rounded down to a group, by vector
// loads (src 4-element aligned); none for kGroups = 0 (the plain form).
template <typename T, int kGroups>
__device__ __forceinline__ RegisterGroups<T, kGroups> load_register_groups(const T* src, int n) {
  RegisterGroups<T, kGroups> r;
  r.elems = kGroups > 0 ? min(n, kGroups * 4 * kSplitThreads) & ~3 : 0;  // (0: a constant)
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int g = static_cast<int>(threadIdx.x) + i * kSplitThreads;
    if (4 * g < r.elems) r.q[i] = reinterpret_cast<const Group4<T>*>(src)[g];
  }
  return r;
}

namespace detail {

// kRegGroups > 0: the register form (above); 0: the whole chunk in shared memory.
template <typename T, int kRegGroups = 0>
__global__ void __launch_bounds__(kSplitThreads, kRegGroups > 0 ? kRegisterFormCtasPerSm : 1)
    softmax_chunk_cluster_kernel(const __grid_constant__ SoftmaxParams<T> p, int chunk_elems, int chunks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies, clusters; launched on sm_90+ only
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t bar;
  __shared__ float2 pushed[kMaxClusterChunks];  // pushed[j]: chunk j's pair
  pdl_wait_for_prior_grid();
  // The next kernel's wait covers this grid's completion, so it may start launching now.
  pdl_launch_dependents();
  // One phase of the cluster barrier tells a CTA that its peers run (and their push barrier is
  // initialised) before it pushes: arrived at the start (cluster_push.cuh), waited for after
  // the copy and the stats.
  announce_push_barriers();
  // The grid is 1-D and the cluster (chunks, 1, 1): CTA `rank` of a cluster is chunk `rank`.
  const std::int64_t row = blockIdx.x / chunks;
  const int rank = static_cast<int>(blockIdx.x % chunks);
  const std::int64_t lo = static_cast<std::int64_t>(rank) * chunk_elems;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(chunk_elems), p.vocab - lo));
  const float inv_t = p.inv_temperature(row);
  const T* src = p.logits + row * p.in_row_stride + lo;
  float* out = p.probs + row * p.out_row_stride + lo;
  // The register form's groups (none in the plain form), then the rest of the chunk.
  const RegisterGroups<T, kRegGroups> regs = load_register_groups<T, kRegGroups>(src, n);
  const SharedChunk<T> c = copy_chunk_to_shared(src + regs.elems, n - regs.elems, smem, &bar);
  const float2 st = chunk_stats(c, inv_t, regs);
  cluster.barrier_wait();
  // Each CTA's pair into its slot of every CTA (cluster_push.cuh's exchange, one use of barrier
  // 0). No remote access comes after the pushes have landed, so a CTA exits without another
  // barrier. Against a cluster.sync, remote reads of the peers' pairs and an arrive / wait
  // around the writes (two GPU-scope fences): H100, graph us, A B A B in one machine start,
  // this kernel 0.85-0.95x at 32-512 x 128256 and 128-1024 x 32000, so auto's time too except
  // where auto takes the pair (32 x 128256, 128 x 32000: 1.00x;
  // history/ab-softmax-async-push-84c3516-h100.txt).
  if (threadIdx.x < chunks) push_async(&pushed[rank], threadIdx.x, st, 0u);
  wait_for_pushes(0u, chunks * sizeof(float2));
  const float2 row_stats = merge_chunk_stats(chunks, [&](int j) { return pushed[j]; });
  regs([&](int k, float(&v)[4], auto) { write_group_probs<4>(out, true, k, v, inv_t, row_stats); });
  write_chunk_probs(c, inv_t, row_stats, out + regs.elems);
#endif
}

}  // namespace detail

// Launches the kernel on `stream` (sm_90+) of the current device `device` with chunk_elems
// from split_cluster_chunk_elems (at most kMaxClusterChunks chunks per row;
// cudaErrorInvalidValue otherwise); `registers`: in the register form where the logits allow
// it (the launcher decides by register_form_serves or a pin).
template <typename T>
cudaError_t softmax_split_cluster(const SoftmaxParams<T>& params, int chunk_elems, bool registers, bool enable_pdl,
                                  cudaStream_t stream, int device) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  const int chunks = static_cast<int>((params.vocab + chunk_elems - 1) / chunk_elems);
  if (chunks > kMaxClusterChunks) return cudaErrorInvalidValue;
  auto kernel = detail::softmax_chunk_cluster_kernel<T>;
  // + 16: the chunk may start up to 15 bytes into its buffer (SharedChunk's pad).
  std::size_t smem = static_cast<std::size_t>(chunk_elems) * sizeof(T) + 16;
  // The register form needs 8-byte-aligned chunks and float4 stores: logits and every row
  // start 4-element aligned (chunk_elems is a multiple of kSplitMinChunk), probs 16-byte
  // aligned; elsewhere the plain form serves.
  if constexpr (sizeof(T) == 2) {
    if (registers && reinterpret_cast<std::uintptr_t>(params.logits) % 8 == 0 && params.in_row_stride % 4 == 0 &&
        reinterpret_cast<std::uintptr_t>(params.probs) % 16 == 0 && params.out_row_stride % 4 == 0) {
      constexpr auto register_form = detail::softmax_chunk_cluster_kernel<T, kRegisterGroups>;
      // The carveout all shared memory takes, so that 8 CTAs fit (kRegisterFormCtasPerSm).
      AOTINFER_CUDA_TRY(ensure_max_shared_carveout<register_form>(device));
      kernel = register_form;
      smem = static_cast<std::size_t>(std::max(chunk_elems - kRegisterElems, 4)) * sizeof(T) + 16;
    }
  }
  return launch_in_clusters(kernel, dim3(static_cast<unsigned>(params.rows * chunks)), dim3(kSplitThreads), smem,
                            stream, enable_pdl, dim3(static_cast<unsigned>(chunks), 1, 1), params, chunk_elems, chunks);
}

}  // namespace aotinfer::sampling
