// Softmax with each row cut into chunks, in two launches, for sm_90 and later.
//
// Why: the one-CTA-per-row kernel (softmax.cuh) runs one CTA per SM at batch 128 and keeps
// ~16 KB per SM in flight, where covering DRAM latency at 4 TB/s on an H200 takes about
// 45 KB; it reaches 49% of copy bandwidth at 128 x 128256. A first version of this pair with
// register loads (2-8 x 16 bytes per thread) did no better (Nsight Compute: its stats kernel
// read at 1.2-1.8 TB/s; benchmarks/results/history/ncu-softmax-split-registers.txt). Here
// every (row, chunk) pair is a CTA that brings its whole chunk (4-32 KB) into shared memory
// with one bulk copy, so several resident CTAs per SM keep far more in flight, without
// registers. Measured at 3404dd5: 38 us = 61% of copy at 128 x 128256 (goal 80%), 4.1 us at
// batch 1; the limit is now instruction issue (stats kernel 65% issue-busy, 44% of DRAM), see
// dev/NOTES.md item 25.
//   1. softmax_chunk_stats_kernel: each CTA writes its chunk's maximum and the sum of
//      exp(x - maximum) to the workspace.
//   2. softmax_chunk_write_kernel: each CTA copies its chunk in again (before its PDL wait:
//      the logits were complete before the stats kernel let it start), merges its row's
//      pairs (every warp on its own: at most a few hundred) and writes the probabilities.
// The second copy reads what the first read moments before, so for batches whose logits fit
// in L2 it is mostly an L2 hit; the write kernel walks the chunks in reverse order, so that
// the most recently read ones, the likeliest still in L2, go first.
//
// Large batches take the one-launch form of this pair instead (softmax_split_cluster.cuh,
// which reuses the copy, stats, merge and write below; the launcher decides).
//
// Any row alignment: the bulk copy moves the chunk's 16-byte-aligned interior, threads load
// the few head and tail elements around it. Numerics follow softmax.cuh (x * inv_t - max, then
// times log2(e), then exp2f), except that each chunk takes its maximum before its sum instead
// of rescaling online. -inf entries give 0; a NaN or +inf anywhere, or a row of only -inf,
// gives a NaN row, as torch.softmax does.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/block_reduce.cuh"
#include "../common/bulk_copy.cuh"
#include "../common/cuda_check.h"
#include "../common/pdl.cuh"
#include "row_access.cuh"
#include "softmax.cuh"

namespace aotinfer::sampling {

constexpr int kSplitThreads = 256;
// Chunk lengths are multiples of this many elements, so ceil(vocab / kSplitMinChunk) bounds
// the chunks per row (the workspace rule that core/aotinfer/_sampling_ops.py follows).
constexpr std::int64_t kSplitMinChunk = 1024;
constexpr int kSplitMinChunkBytes = 4096;
constexpr int kSplitMaxChunkBytes = 32768;

// Workspace floats the split softmax needs for `rows` rows of `vocab`: one (max, sum) pair per
// chunk at the smallest chunk length.
inline std::int64_t split_softmax_workspace_floats(std::int64_t rows, std::int64_t vocab) {
  return 2 * rows * ((vocab + kSplitMinChunk - 1) / kSplitMinChunk);
}

namespace detail {

// One chunk of one row in shared memory: its n elements at s[0 .. n).
template <typename T>
struct SharedChunk {
  const T* s;
  int n;
  bool aligned;  // s itself is 16-byte aligned (the row chunk starts on a 16-byte boundary)
};

// Brings src[0 .. n) into shared memory at `smem` (n * sizeof(T) + 16 bytes): one bulk copy of
// the 16-byte-aligned interior, at an offset that keeps it aligned in shared memory, and
// threads load the head before it and the tail after it. Call from every thread; returns
// after the data is in place.
template <typename T>
__device__ __forceinline__ SharedChunk<T> copy_chunk_to_shared(const T* src, int n, unsigned char* smem,
                                                                std::uint64_t* bar) {
  const auto addr = reinterpret_cast<std::uintptr_t>(src);
  int head = static_cast<int>(((16 - addr % 16) % 16) / sizeof(T));
  if (head > n) head = n;
  const int bulk_elems = static_cast<int>((n - head) * sizeof(T) / 16 * 16 / sizeof(T));
  const int pad = static_cast<int>((16 - head * sizeof(T) % 16) % 16);
  T* s = reinterpret_cast<T*>(smem + pad);
  if (bulk_elems > 0) {
    if (threadIdx.x == 0) mbarrier_init(bar, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned bytes = static_cast<unsigned>(bulk_elems * sizeof(T));
      mbarrier_arrive_expect_tx(bar, bytes);
      bulk_copy_to_shared(s + head, src + head, bytes, bar);
    }
  }
  for (int i = threadIdx.x; i < head; i += blockDim.x) s[i] = src[i];
  for (int i = head + bulk_elems + threadIdx.x; i < n; i += blockDim.x) s[i] = src[i];
  // One thread polls the barrier and the others wait in __syncthreads, which takes no issue
  // slots. (With every thread polling the kernels ran as fast, ca62d3f against f0006f0: the
  // poll loop was not what kept them issue-bound.) The barrier makes the copy visible to the
  // polling thread, __syncthreads passes it to the rest of the CTA.
  if (bulk_elems > 0 && threadIdx.x == 0) mbarrier_wait_parity(bar, 0);
  __syncthreads();
  return {s, n, pad == 0};
}

// f(k, v, count) over this thread's share of the chunk: elements k .. k + count - 1 with
// values v[0 .. count) as float; count is a std::integral_constant (so loops over it unroll
// and v stays in registers): 4 for whole groups of four (one 8- or 16-byte shared load when
// the chunk is aligned), 1 otherwise. Thread t takes groups t, t + blockDim, ..., so a warp's
// groups are consecutive and its float4 output stores cover 512 contiguous bytes.
template <typename T, typename F>
__device__ __forceinline__ void for_each_shared_group4(const SharedChunk<T>& c, F&& f) {
  int first_scalar = 0;
  if (c.aligned) {
    const int groups = c.n / 4;
#pragma unroll 2
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      const Group4<T> x = reinterpret_cast<const Group4<T>*>(c.s)[g];
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = load_float(&x.v[j]);
      f(g * 4, v, std::integral_constant<int, 4>{});
    }
    first_scalar = groups * 4;
  }
  for (int i = first_scalar + threadIdx.x; i < c.n; i += blockDim.x) {
    float v[4];
    v[0] = load_float(c.s + i);
    f(i, v, std::integral_constant<int, 1>{});
  }
}

// 2^x on the special-function unit with subnormal results flushed to zero: one instruction
// where exp2f takes about four. Used only for the stats kernel's sum, where it is exact: the
// sum is at least 1 (its largest term is 2^0), so a term below 2^-126 cannot change it. The
// write kernel keeps exp2f: flushed probabilities were zeros where torch.softmax gives
// subnormals (at 3404dd5 the GPU suite's compiled-vs-uncompiled LogitsPipe test saw up to 37%
// of a temperature-0.1 batch's entries differ in whether they are zero; benchmarks/results/
// history/gpu-tests-3404dd5-failures.txt).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Maximum that propagates NaN (fmaxf drops it), so one NaN reaches the block's maximum.
__device__ __forceinline__ float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

struct MaxNanOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};

// The chunk's (maximum of x * inv_t, sum of exp(x * inv_t - maximum)), in every thread; a NaN
// logit (or +inf, as in torch) gives (-inf, NaN). Call from every thread.
//
// The maximum, then the sum against it: two cheap passes over shared memory and two plain
// block reductions, where an online (max, sum) costs a rescale per group and an exp2 per
// shuffle step. The stats kernel is issue-bound (Nsight Compute at ca62d3f: IPC 3.3), so
// instructions are what counts; this and four-element groups together took 128 x 128256 from
// 45.8 to 38.6 us.
//
// `also` visits elements of the chunk held elsewhere (registers): also(f) calls f as
// for_each_shared_group4 does; the default visits none.
struct NoOtherElements {
  template <typename F>
  __device__ __forceinline__ void operator()(F&&) const {}
};

template <typename T, typename Also = NoOtherElements>
__device__ __forceinline__ float2 chunk_stats(const SharedChunk<T>& c, float inv_t, Also&& also = {}) {
  float x_max = -INFINITY;
  const auto fold_max = [&](int, float(&v)[4], auto count) {
#pragma unroll
    for (int j = 0; j < decltype(count)::value; ++j) x_max = max_nan(x_max, v[j]);
  };
  also(fold_max);
  for_each_shared_group4(c, fold_max);
  // inv_t > 0 and rounding is monotone: the scaled maximum.
  const float m = block_reduce(x_max, MaxNanOp{}, -INFINITY) * inv_t;
  float sum = 0.f;
  if (m != -INFINITY) {  // only -inf: no terms (x - max would be NaN)
    const auto fold_sum = [&](int, float(&v)[4], auto count) {
#pragma unroll
      for (int j = 0; j < decltype(count)::value; ++j) sum += fast_exp2((v[j] * inv_t - m) * kLog2e);
    };
    also(fold_sum);
    for_each_shared_group4(c, fold_sum);
  }
  sum = block_reduce(sum, SumOp{}, 0.f);
  // A NaN maximum or a NaN sum flags a NaN or +inf logit.
  const bool nan = m != m || sum != sum;
  return make_float2(nan ? -INFINITY : m, nan ? NAN : sum);
}

// The row's (maximum, 1 / sum) from its chunks' chunk_stats pairs, stats_of(j) for j in
// [0, chunks); every warp computes it on its own (a row has at most a few hundred chunks).
template <typename F>
__device__ __forceinline__ float2 merge_chunk_stats(int chunks, F&& stats_of) {
  OnlineMax acc;
  for (int j = threadIdx.x % 32; j < chunks; j += 32) {
    const float2 st = stats_of(j);
    OnlineMax o;
    o.m = st.x;
    o.has_nan = st.y != st.y;
    o.s = o.has_nan ? 0.f : st.y;
    acc.merge(o);
  }
  for (int mask = 16; mask > 0; mask >>= 1) acc.merge(shfl_xor(acc, mask));
  return make_float2(acc.m, acc.has_nan ? NAN : 1.f / acc.s);
}

// Writes the probabilities exp(x * inv_t - m) * inv_s of elements k .. k + count - 1 (values
// v, as for_each_shared_group4 gives them) to out[k ..]: one float4 streaming store for a
// whole group where out is 16-byte aligned.
template <int kCount>
__device__ __forceinline__ void write_group_probs(float* out, bool out_aligned, int k, float (&v)[4], float inv_t,
                                                  float2 row) {
  const float m = row.x, inv_s = row.y;
#pragma unroll
  for (int j = 0; j < kCount; ++j) v[j] = exp2f((v[j] * inv_t - m) * kLog2e) * inv_s;
  if (kCount == 4 && out_aligned) {
    __stcs(reinterpret_cast<float4*>(out + k), make_float4(v[0], v[1], v[2], v[3]));
  } else {
#pragma unroll
    for (int j = 0; j < kCount; ++j) out[k + j] = v[j];
  }
}

// Writes the chunk's probabilities to out[0 .. c.n) (write_group_probs).
template <typename T>
__device__ __forceinline__ void write_chunk_probs(const SharedChunk<T>& c, float inv_t, float2 row, float* out) {
  const bool out_aligned = reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  for_each_shared_group4(c, [&](int k, float(&v)[4], auto count) {
    write_group_probs<decltype(count)::value>(out, out_aligned, k, v, inv_t, row);
  });
}

template <typename T>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_chunk_stats_kernel(const __grid_constant__ SoftmaxParams<T> p, int chunk_elems, int chunks,
                               float2* stats) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies; launched on sm_90+ only
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t bar;
  pdl_wait_for_prior_grid();
  // The write kernel waits for this grid's completion before it reads `stats`; letting it
  // start now overlaps its launch and its logit copies with this grid's tail.
  pdl_launch_dependents();
  const std::int64_t row = blockIdx.x / chunks;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x % chunks) * chunk_elems;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(chunk_elems), p.vocab - lo));
  const float inv_t = p.inv_temperature(row);
  const SharedChunk<T> c = copy_chunk_to_shared(p.logits + row * p.in_row_stride + lo, n, smem, &bar);
  const float2 st = chunk_stats(c, inv_t);
  if (threadIdx.x == 0) stats[blockIdx.x] = st;
#endif
}

template <typename T>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_chunk_write_kernel(const __grid_constant__ SoftmaxParams<T> p, int chunk_elems, int chunks,
                               const float2* stats) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies; launched on sm_90+ only
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t bar;
  const unsigned flat = gridDim.x - 1 - blockIdx.x;  // reverse order: see the file comment
  const std::int64_t row = flat / chunks;
  const std::int64_t lo = static_cast<std::int64_t>(flat % chunks) * chunk_elems;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(chunk_elems), p.vocab - lo));
  const SharedChunk<T> c = copy_chunk_to_shared(p.logits + row * p.in_row_stride + lo, n, smem, &bar);
  const float inv_t = p.inv_temperature(row);
  pdl_wait_for_prior_grid();
  pdl_launch_dependents();
  const float2* row_stats = stats + row * chunks;
  const float2 row_m_inv_s = merge_chunk_stats(chunks, [&](int j) { return row_stats[j]; });
  write_chunk_probs(c, inv_t, row_m_inv_s, p.probs + row * p.out_row_stride + lo);
#endif
}

}  // namespace detail

// Chunk length in elements: the largest power-of-two byte size in [4, 32] KB that still gives
// every SM kCtasPerSm CTAs (more, shorter CTAs for small batches; a 32 KB copy per CTA for
// large ones). `pinned_kb` (AOTINFER_SOFTMAX_SPLIT_CHUNK_KB) overrides it when nonzero.
// kCtasPerSm = 2 from the chunk sweep at e19976e on an H200 (benchmarks/results/history/
// softmax-e19976e-chunk-sweep.md, per call in a graph): 128 x 32000 ran 16.9 / 12.0 / 12.7 us
// at 4 / 16 / 32 KB (8 CTAs per SM picked 4 KB), 16 x 128256 9.6 / 8.3 / 8.9, 128 x 128256
// 62 / 38.6 / 38.2, batch 1 4.1 / 5.0 / 6.4.
inline int split_softmax_chunk_elems(std::int64_t rows, std::int64_t vocab, int elem_bytes, int sms,
                                     int pinned_kb) {
  constexpr int kCtasPerSm = 2;
  int bytes = kSplitMaxChunkBytes;
  if (pinned_kb != 0) {
    bytes = pinned_kb * 1024;
  } else {
    const std::int64_t total = rows * vocab * elem_bytes;
    while (bytes > kSplitMinChunkBytes && total / bytes < static_cast<std::int64_t>(kCtasPerSm) * sms) bytes /= 2;
  }
  return bytes / elem_bytes;
}

// Launches both kernels on `stream` (sm_90+). `stats` holds at least
// split_softmax_workspace_floats() floats, 8-byte aligned; chunk_elems is a multiple of
// kSplitMinChunk of at most kSplitMaxChunkBytes. The write kernel follows the stats kernel
// under PDL; enable_pdl governs the stats kernel's relation to the previous kernel in the
// stream, as for every other launch.
template <typename T>
cudaError_t softmax_split(const SoftmaxParams<T>& params, float2* stats, int chunk_elems, bool enable_pdl,
                          cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  const int chunks = static_cast<int>((params.vocab + chunk_elems - 1) / chunk_elems);
  const dim3 grid(static_cast<unsigned>(params.rows * chunks));
  const dim3 block(kSplitThreads);
  // + 16: the chunk may start up to 15 bytes into its buffer (SharedChunk's pad).
  const std::size_t smem = static_cast<std::size_t>(chunk_elems) * sizeof(T) + 16;
  AOTINFER_CUDA_TRY(launch_with_pdl(detail::softmax_chunk_stats_kernel<T>, grid, block, smem, stream, enable_pdl,
                                    params, chunk_elems, chunks, stats));
  AOTINFER_CUDA_TRY(launch_with_pdl(detail::softmax_chunk_write_kernel<T>, grid, block, smem, stream, true, params,
                                    chunk_elems, chunks, static_cast<const float2*>(stats)));
  return cudaSuccess;
}

}  // namespace aotinfer::sampling
