// Softmax with each row cut into chunks, in two launches, for batches of long rows.
//
// Why: the one-CTA-per-row kernel (softmax.cuh) runs one CTA per SM at batch 128 and is bound
// by that CTA's own throughput (47 us at 128 x 128256 on an H200, 49% of copy bandwidth), and
// the cluster kernel loses from batch 128 on. Here every (row, chunk) pair is its own small
// CTA, so several CTAs per SM keep many loads in flight whatever the batch.
//   1. softmax_chunk_stats_kernel: each CTA folds its chunk into an online (max, sum) pair
//      and writes it to the workspace.
//   2. softmax_chunk_write_kernel: each CTA merges its row's pairs (every warp on its own: a
//      row has at most a few hundred) and writes its chunk's probabilities.
// The second launch reads the chunk again; the first read it moments before, so for batches
// whose logits fit in L2 the re-read is an L2 hit. It walks the chunks in reverse order, so
// that the most recently read ones, the likeliest still in L2, go first.
//
// Numerics are those of softmax.cuh (same OnlineMax, same x * inv_t - max then exp2): -inf
// entries give 0, a NaN anywhere or a row of only -inf gives a NaN row.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/cuda_check.h"
#include "../common/pdl.cuh"
#include "softmax.cuh"

namespace aotinfer::sampling {

constexpr int kSplitThreads = 512;
// Vector loads per thread per chunk (kLoads), all issued before the first is used: 2, 4 or 8.
// More loads make longer CTAs with more bytes in flight (a CTA's loads come in one burst, so
// short CTAs leave an SM idle between bursts); fewer make more CTAs for small batches.
constexpr int kSplitMinLoads = 2;
// Chunk length for the scalar path at the fewest loads; every variant's chunk is a multiple
// of it, so ceil(vocab / kSplitMinChunk) bounds the chunks per row (the workspace rule that
// core/aotinfer/_sampling_ops.py follows).
constexpr std::int64_t kSplitMinChunk = static_cast<std::int64_t>(kSplitThreads) * kSplitMinLoads;

// Workspace floats the split softmax needs for `rows` rows of `vocab`: one (max, sum) pair per
// chunk at the smallest chunk length.
inline std::int64_t split_softmax_workspace_floats(std::int64_t rows, std::int64_t vocab) {
  return 2 * rows * ((vocab + kSplitMinChunk - 1) / kSplitMinChunk);
}

namespace detail {

// The chunk [lo, hi) of one row and the vectors this thread owns in it.
template <int kVec, int kLoads>
struct SplitChunk {
  static constexpr std::int64_t kElems = static_cast<std::int64_t>(kSplitThreads) * kLoads * kVec;
  std::int64_t row, lo, hi;
  __device__ SplitChunk(std::int64_t flat_cta, int chunks, std::int64_t vocab)
      : row(flat_cta / chunks), lo((flat_cta % chunks) * kElems), hi(min(lo + kElems, vocab)) {}
  // First element of this thread's u-th vector; whole vectors only (index + kVec <= hi).
  __device__ std::int64_t vec_start(int u) const {
    return lo + (static_cast<std::int64_t>(u) * kSplitThreads + threadIdx.x) * kVec;
  }
  // Elements past the last whole vector: only when vocab % kVec != 0, in the last chunk.
  __device__ std::int64_t tail_start() const { return lo + (hi - lo) / kVec * kVec; }
};

// Loads this thread's vectors of the chunk (16 bytes each when kVec > 1); `evict_first` marks
// a last read of them.
template <typename T, int kVec, int kLoads, bool kEvictFirst>
__device__ __forceinline__ void load_chunk(const T* in, const SplitChunk<kVec, kLoads>& c,
                                           Vec<T, kVec> (&x)[kLoads], bool (&ok)[kLoads]) {
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const std::int64_t i = c.vec_start(u);
    ok[u] = i + kVec <= c.hi;
    if (!ok[u]) continue;
    const auto* src = reinterpret_cast<const Vec<T, kVec>*>(in + i);
    if constexpr (kEvictFirst && sizeof(Vec<T, kVec>) == 16) {
      const int4 raw = __ldcs(reinterpret_cast<const int4*>(src));
      x[u] = *reinterpret_cast<const Vec<T, kVec>*>(&raw);
    } else {
      x[u] = *src;
    }
  }
}

template <typename T, int kVec, int kLoads>
__global__ void __launch_bounds__(kSplitThreads, 2)
    softmax_chunk_stats_kernel(const __grid_constant__ SoftmaxParams<T> p, int chunks, float2* stats) {
  pdl_wait_for_prior_grid();
  // The write kernel waits for this grid's completion before it reads `stats`; letting it
  // start now overlaps its launch and its logit loads with this grid's tail.
  pdl_launch_dependents();
  const SplitChunk<kVec, kLoads> c(blockIdx.x, chunks, p.vocab);
  const float inv_t =
      1.f / (p.temperature_array != nullptr ? p.temperature_array[c.row] : p.temperature);
  const T* in = p.logits + c.row * p.in_row_stride;

  Vec<T, kVec> x[kLoads];
  bool ok[kLoads];
  load_chunk<T, kVec, kLoads, false>(in, c, x, ok);
  OnlineMax acc;
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    if (!ok[u]) continue;
    float f[kVec];
    float vmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      f[j] = to_float(x[u].v[j]) * inv_t;
      vmax = fmaxf(vmax, f[j]);
    }
    acc.rescale_to(vmax);
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc.add(f[j]);
  }
  for (std::int64_t i = c.tail_start() + threadIdx.x; i < c.hi; i += blockDim.x) {
    const float f = to_float(in[i]) * inv_t;
    acc.rescale_to(f);
    acc.add(f);
  }
  const OnlineMax chunk_acc = block_merge(acc);
  if (threadIdx.x == 0) stats[blockIdx.x] = make_float2(chunk_acc.m, chunk_acc.has_nan ? NAN : chunk_acc.s);
}

template <typename T, int kVec, int kLoads>
__global__ void __launch_bounds__(kSplitThreads, 2)
    softmax_chunk_write_kernel(const __grid_constant__ SoftmaxParams<T> p, int chunks, const float2* stats) {
  const std::int64_t flat = static_cast<std::int64_t>(gridDim.x) - 1 - blockIdx.x;  // reverse order
  const SplitChunk<kVec, kLoads> c(flat, chunks, p.vocab);
  const T* in = p.logits + c.row * p.in_row_stride;
  float* out = p.probs + c.row * p.out_row_stride;
  // The logits were complete before the stats kernel passed its own wait (it lets this grid
  // start only after that), so they are loaded before this grid's wait; only `stats` needs it.
  Vec<T, kVec> x[kLoads];
  bool ok[kLoads];
  load_chunk<T, kVec, kLoads, true>(in, c, x, ok);
  const float inv_t =
      1.f / (p.temperature_array != nullptr ? p.temperature_array[c.row] : p.temperature);
  pdl_wait_for_prior_grid();
  pdl_launch_dependents();

  OnlineMax acc;
  const float2* row_stats = stats + c.row * chunks;
  for (int j = threadIdx.x % 32; j < chunks; j += 32) {
    const float2 st = row_stats[j];
    OnlineMax o;
    o.m = st.x;
    o.has_nan = st.y != st.y;
    o.s = o.has_nan ? 0.f : st.y;
    acc.merge(o);
  }
  for (int mask = 16; mask > 0; mask >>= 1) acc.merge(shfl_xor(acc, mask));
  const float m = acc.m;
  const float inv_s = acc.has_nan ? NAN : 1.f / acc.s;

  constexpr int kOutVec = kVec >= 4 ? 4 : 1;
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    if (!ok[u]) continue;
    float* dst = out + c.vec_start(u);
#pragma unroll
    for (int j = 0; j < kVec; j += kOutVec) {
      Vec<float, kOutVec> o;
#pragma unroll
      for (int k = 0; k < kOutVec; ++k) o.v[k] = exp2f((to_float(x[u].v[j + k]) * inv_t - m) * kLog2e) * inv_s;
      if constexpr (kOutVec == 4) {
        __stcs(reinterpret_cast<float4*>(dst + j), make_float4(o.v[0], o.v[1], o.v[2], o.v[3]));
      } else {
        __stcs(dst + j, o.v[0]);
      }
    }
  }
  for (std::int64_t i = c.tail_start() + threadIdx.x; i < c.hi; i += blockDim.x) {
    out[i] = exp2f((to_float(in[i]) * inv_t - m) * kLog2e) * inv_s;
  }
}

}  // namespace detail

namespace detail {

template <typename T, int kVec, int kLoads>
cudaError_t launch_split(const SoftmaxParams<T>& params, float2* stats, bool enable_pdl, bool has_pdl,
                         cudaStream_t stream) {
  constexpr std::int64_t kChunk = SplitChunk<kVec, kLoads>::kElems;
  const int chunks = static_cast<int>((params.vocab + kChunk - 1) / kChunk);
  const dim3 grid(static_cast<unsigned>(params.rows * chunks));
  const dim3 block(kSplitThreads);
  AOTINFER_CUDA_TRY(launch_with_pdl(softmax_chunk_stats_kernel<T, kVec, kLoads>, grid, block, 0, stream,
                                    enable_pdl, params, chunks, stats));
  AOTINFER_CUDA_TRY(launch_with_pdl(softmax_chunk_write_kernel<T, kVec, kLoads>, grid, block, 0, stream, has_pdl,
                                    params, chunks, static_cast<const float2*>(stats)));
  return cudaSuccess;
}

template <typename T, int kVec>
cudaError_t launch_split_loads(const SoftmaxParams<T>& params, float2* stats, int loads, bool enable_pdl,
                               bool has_pdl, cudaStream_t stream) {
  if (loads == 8) return launch_split<T, kVec, 8>(params, stats, enable_pdl, has_pdl, stream);
  if (loads == 4) return launch_split<T, kVec, 4>(params, stats, enable_pdl, has_pdl, stream);
  return launch_split<T, kVec, 2>(params, stats, enable_pdl, has_pdl, stream);
}

}  // namespace detail

// Chunks per row of the split softmax with `loads` vector loads per thread.
inline std::int64_t split_softmax_chunks(std::int64_t vocab, int vec, int loads) {
  const std::int64_t chunk = static_cast<std::int64_t>(kSplitThreads) * loads * vec;
  return (vocab + chunk - 1) / chunk;
}

// Launches both kernels on `stream`. `stats` holds at least split_softmax_workspace_floats()
// floats, 8-byte aligned. `loads`: 2, 4 or 8 vector loads per thread. vectorized: as for
// softmax(). The write kernel follows the stats kernel under PDL where the device has it
// (has_pdl); enable_pdl governs the stats kernel's relation to the previous kernel in the
// stream, as for every other launch.
template <typename T>
cudaError_t softmax_split(const SoftmaxParams<T>& params, float2* stats, int loads, bool vectorized,
                          bool enable_pdl, bool has_pdl, cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  constexpr int kVec = 16 / sizeof(T);
  if (vectorized) return detail::launch_split_loads<T, kVec>(params, stats, loads, enable_pdl, has_pdl, stream);
  return detail::launch_split_loads<T, 1>(params, stats, loads, enable_pdl, has_pdl, stream);
}

}  // namespace aotinfer::sampling
