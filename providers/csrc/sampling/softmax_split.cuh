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
#include "../common/launch_cache.h"
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

// How the pair's grid covers the batch (split_softmax_grid): chunk length and count per row,
// chunks in all, buffers per CTA and their size in bytes.
struct SplitGrid {
  int chunk_elems, chunks;
  unsigned total;
  int stages;
  int buf_bytes;
};

namespace detail {

// One chunk of one row in shared memory: its n elements at s[0 .. n).
template <typename T>
struct SharedChunk {
  const T* s;
  int n;
  bool aligned;  // s itself is 16-byte aligned (the row chunk starts on a 16-byte boundary)
};

// Chunk `flat` of the batch (row-major: chunk j of row r is r * chunks + j).
struct ChunkPos {
  unsigned flat;
  std::int64_t row, lo;  // its row and first element
  int n;                 // its length
};

// A chunk's 16-byte-aligned interior moves by one bulk copy, at a buffer offset (pad) that
// keeps it aligned in shared memory; threads load the `head` elements before it and the tail
// after it.
template <typename T>
struct ChunkLayout {
  int head, bulk, pad;
  __device__ __forceinline__ static ChunkLayout of(const T* src, int n) {
    const auto addr = reinterpret_cast<std::uintptr_t>(src);
    int head = static_cast<int>(((16 - addr % 16) % 16) / sizeof(T));
    if (head > n) head = n;
    const int bulk = static_cast<int>((n - head) * sizeof(T) / 16 * 16 / sizeof(T));
    return ChunkLayout{head, bulk, static_cast<int>((16 - head * sizeof(T) % 16) % 16)};
  }
};

// The chunks of one CTA of a persistent grid: chunk indices c = blockIdx.x, + gridDim.x, ...
// below `total` (flat = c, or total - 1 - c with `reverse`), each brought into one of
// `stages` shared-memory buffers (1 or 2, buf_bytes each, one mbarrier each) by a bulk copy.
// With two stages the copy of the next chunk is in flight while the CTA computes on this
// one. A CTA that owns one chunk (grid = total) is the one-copy-per-CTA pair of 3404dd5.
template <typename T>
struct ChunkRing {
  const T* logits;
  std::int64_t in_row_stride, vocab;
  int chunk_elems, chunks;
  unsigned total;
  int stages;
  int buf_bytes;
  unsigned char* smem;
  std::uint64_t* bars;
  bool reverse;

  __device__ __forceinline__ ChunkPos pos(unsigned c) const {
    const unsigned flat = reverse ? total - 1 - c : c;
    const std::int64_t row = flat / chunks, lo = static_cast<std::int64_t>(flat % chunks) * chunk_elems;
    return ChunkPos{flat, row, lo, static_cast<int>(min(static_cast<std::int64_t>(chunk_elems), vocab - lo))};
  }
  __device__ __forceinline__ const T* src(const ChunkPos& q) const { return logits + q.row * in_row_stride + q.lo; }

  // Thread 0 starts the copy of chunk c into buffer b (always one arrival, so every use of a
  // barrier completes a phase, even with nothing to copy).
  __device__ __forceinline__ void issue(unsigned c, int b) const {
    if (threadIdx.x != 0 || c >= total) return;
    const ChunkPos q = pos(c);
    const ChunkLayout<T> l = ChunkLayout<T>::of(src(q), q.n);
    unsigned char* buf = smem + b * buf_bytes;
    fence_proxy_async_shared();  // the buffer's last readers and head/tail writers came first
    const unsigned bytes = static_cast<unsigned>(l.bulk * sizeof(T));
    mbarrier_arrive_expect_tx(&bars[b], bytes);
    if (bytes > 0) bulk_copy_to_shared(buf + l.pad + l.head * sizeof(T), src(q) + l.head, bytes, &bars[b]);
  }

  // Every thread: initialises the barriers and starts this CTA's first copy.
  __device__ __forceinline__ void start() const {
    if (threadIdx.x == 0) {
      for (int b = 0; b < stages; ++b) mbarrier_init(&bars[b], 1);
    }
    __syncthreads();
    issue(blockIdx.x, 0);
  }

  // body(q, chunk) for every chunk of this CTA, in order; every thread calls it.
  template <typename Body>
  __device__ __forceinline__ void run(Body&& body) const {
    unsigned parity = 0;  // bit b: the phase buffer b completes next
    int i = 0;
    for (unsigned c = blockIdx.x; c < total; c += gridDim.x, ++i) {
      const int b = stages == 2 ? (i & 1) : 0;
      if (stages == 2) issue(c + gridDim.x, b ^ 1);  // that buffer was released last iteration
      const ChunkPos q = pos(c);
      const T* from = src(q);
      const ChunkLayout<T> l = ChunkLayout<T>::of(from, q.n);
      T* s = reinterpret_cast<T*>(smem + b * buf_bytes + l.pad);
      for (int k = threadIdx.x; k < l.head; k += blockDim.x) s[k] = from[k];
      for (int k = l.head + l.bulk + threadIdx.x; k < q.n; k += blockDim.x) s[k] = from[k];
      // One thread polls the barrier and the others wait in __syncthreads, which takes no
      // issue slots; the barrier makes the copy visible to the poller, __syncthreads passes
      // it on to the CTA.
      if (threadIdx.x == 0) mbarrier_wait_parity(&bars[b], (parity >> b) & 1u);
      parity ^= 1u << b;
      __syncthreads();
      body(q, SharedChunk<T>{s, q.n, l.pad == 0});
      __syncthreads();  // buffer b is free
      if (stages == 1) issue(c + gridDim.x, 0);
    }
  }
};

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

// The ring of a kernel of this pair (see ChunkRing).
template <typename T>
__device__ __forceinline__ ChunkRing<T> softmax_ring(const SoftmaxParams<T>& p, const SplitGrid& g,
                                                     unsigned char* smem, std::uint64_t* bars, bool reverse) {
  return ChunkRing<T>{p.logits, p.in_row_stride, p.vocab, g.chunk_elems, g.chunks, g.total,
                      g.stages, g.buf_bytes, smem, bars, reverse};
}

template <typename T>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_chunk_stats_kernel(const __grid_constant__ SoftmaxParams<T> p, const SplitGrid g, float2* stats) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies; launched on sm_90+ only
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t bars[2];
  pdl_wait_for_prior_grid();
  // The write kernel waits for this grid's completion before it reads `stats`; letting it
  // start now overlaps its launch and its logit copies with this grid's tail.
  pdl_launch_dependents();
  const ChunkRing<T> ring = softmax_ring(p, g, smem, bars, false);
  ring.start();
  ring.run([&](const ChunkPos& q, const SharedChunk<T>& c) {
  const float inv_t = 1.f / (p.temperature_array != nullptr ? p.temperature_array[q.row] : p.temperature);

  // The chunk's maximum, then its sum against that maximum: two cheap passes over shared
  // memory and two plain block reductions, where an online (max, sum) costs a rescale per
  // group and an exp2 per shuffle step. The kernel is issue-bound (Nsight Compute at ca62d3f:
  // IPC 3.3), so instructions are what counts; this change and four-element groups together
  // took 128 x 128256 from 45.8 to 38.6 us.
  float x_max = -INFINITY;
  for_each_shared_group4(c, [&](int, float(&v)[4], auto count) {
#pragma unroll
    for (int j = 0; j < decltype(count)::value; ++j) x_max = max_nan(x_max, v[j]);
  });
  // inv_t > 0 and rounding is monotone: the scaled maximum.
  const float m = block_reduce(x_max, MaxNanOp{}, -INFINITY) * inv_t;
  float sum = 0.f;
  if (m != -INFINITY) {  // only -inf: no terms (x - max would be NaN)
    for_each_shared_group4(c, [&](int, float(&v)[4], auto count) {
#pragma unroll
      for (int j = 0; j < decltype(count)::value; ++j) sum += fast_exp2((v[j] * inv_t - m) * kLog2e);
    });
  }
  sum = block_reduce(sum, SumOp{}, 0.f);
  // A NaN logit (or +inf, as in torch) makes the maximum or the sum NaN: a NaN sum flags it.
  if (threadIdx.x == 0) {
    const bool nan = m != m || sum != sum;
    stats[q.flat] = make_float2(nan ? -INFINITY : m, nan ? NAN : sum);
  }
  });
#endif
}

template <typename T>
__global__ void __launch_bounds__(kSplitThreads)
    softmax_chunk_write_kernel(const __grid_constant__ SoftmaxParams<T> p, const SplitGrid g, const float2* stats) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies; launched on sm_90+ only
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t bars[2];
  const ChunkRing<T> ring = softmax_ring(p, g, smem, bars, true);  // reverse: see the file comment
  ring.start();  // the logits were complete before the stats kernel let this grid start
  pdl_wait_for_prior_grid();
  pdl_launch_dependents();
  const int chunks = g.chunks;
  ring.run([&](const ChunkPos& q, const SharedChunk<T>& c) {
  const std::int64_t row = q.row;
  const float inv_t = 1.f / (p.temperature_array != nullptr ? p.temperature_array[row] : p.temperature);
  OnlineMax acc;
  const float2* row_stats = stats + row * chunks;
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

  float* out = p.probs + row * p.out_row_stride + q.lo;
  const bool out_aligned = reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  for_each_shared_group4(c, [&](int k, float(&v)[4], auto count) {
    constexpr int kCount = decltype(count)::value;
#pragma unroll
    for (int j = 0; j < kCount; ++j) v[j] = exp2f((v[j] * inv_t - m) * kLog2e) * inv_s;
    if (kCount == 4 && out_aligned) {
      __stcs(reinterpret_cast<float4*>(out + k), make_float4(v[0], v[1], v[2], v[3]));
    } else {
#pragma unroll
      for (int j = 0; j < kCount; ++j) out[k + j] = v[j];
    }
  });
  });
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

// Shared memory the runtime keeps per CTA plus this pair's static shared memory (barriers,
// reduction scratch), rounded up: what bounds CTAs per SM beside the buffers.
constexpr int kSplitCtaSmemOverhead = 2048;
constexpr int kSplitMaxCtasPerSm = 2048 / kSplitThreads;  // by threads

// CTAs of the pair resident per SM with `stages` buffers of buf_bytes.
inline int split_softmax_ctas_per_sm(int stages, int buf_bytes, int smem_per_sm) {
  const int by_smem = smem_per_sm / (stages * buf_bytes + kSplitCtaSmemOverhead);
  return by_smem < 1 ? 1 : (by_smem > kSplitMaxCtasPerSm ? kSplitMaxCtasPerSm : by_smem);
}

// The pair's grid. When the chunks fit in one wave of one-buffer CTAs, every CTA takes one
// chunk (3404dd5's pair). Otherwise (`ring`) a persistent grid of two-buffer CTAs walks the
// chunks, copying the next chunk while it computes on this one: with one chunk per CTA the
// whole wave copied and then the whole wave computed, leaving DRAM idle in between (the stats
// kernel read at 44% of DRAM peak; its SASS is ~9.5 instructions per element, so issue was not
// the limit). Unpinned, the chunk shrinks (down to 4 KB) until each CTA walks at least
// kRingChunksPerCta chunks, so that CTAs finish within about a chunk of each other. Returns the
// grid size in CTAs.
inline unsigned split_softmax_grid(std::int64_t rows, std::int64_t vocab, int elem_bytes, int sms, int smem_per_sm,
                                   int pinned_kb, bool ring, SplitGrid* g) {
  constexpr int kRingChunksPerCta = 3;
  int chunk = split_softmax_chunk_elems(rows, vocab, elem_bytes, sms, pinned_kb);
  auto fill = [&](int stages) {
    g->chunk_elems = chunk;
    g->chunks = static_cast<int>((vocab + chunk - 1) / chunk);
    g->total = static_cast<unsigned>(rows * g->chunks);
    g->stages = stages;
    g->buf_bytes = chunk * elem_bytes + 16;  // + 16: the chunk may start 15 bytes in (pad)
    return static_cast<unsigned>(sms) * split_softmax_ctas_per_sm(stages, g->buf_bytes, smem_per_sm);
  };
  const unsigned one_wave = fill(1);
  if (!ring || g->total <= one_wave) return g->total;  // one chunk per CTA
  unsigned resident = fill(2);
  while (pinned_kb == 0 && chunk * elem_bytes > kSplitMinChunkBytes && g->total < kRingChunksPerCta * resident) {
    chunk /= 2;
    resident = fill(2);
  }
  return resident < g->total ? resident : g->total;
}

// Launches both kernels on `stream` (sm_90+) over the grid of split_softmax_grid. `stats` holds
// at least split_softmax_workspace_floats() floats, 8-byte aligned. The write kernel follows
// the stats kernel under PDL; enable_pdl governs the stats kernel's relation to the previous
// kernel in the stream, as for every other launch.
template <typename T>
cudaError_t softmax_split(const SoftmaxParams<T>& params, float2* stats, const SplitGrid& g, unsigned grid_ctas,
                          bool enable_pdl, int device, cudaStream_t stream) {
  if (params.rows == 0 || params.vocab == 0) return cudaSuccess;
  const dim3 grid(grid_ctas), block(kSplitThreads);
  const int smem = g.stages * g.buf_bytes;
  AOTINFER_CUDA_TRY(ensure_dynamic_smem<detail::softmax_chunk_stats_kernel<T>>(smem, device));
  AOTINFER_CUDA_TRY(ensure_dynamic_smem<detail::softmax_chunk_write_kernel<T>>(smem, device));
  AOTINFER_CUDA_TRY(launch_with_pdl(detail::softmax_chunk_stats_kernel<T>, grid, block,
                                    static_cast<std::size_t>(smem), stream, enable_pdl, params, g, stats));
  AOTINFER_CUDA_TRY(launch_with_pdl(detail::softmax_chunk_write_kernel<T>, grid, block,
                                    static_cast<std::size_t>(smem), stream, true, params, g,
                                    static_cast<const float2*>(stats)));
  return cudaSuccess;
}

}  // namespace aotinfer::sampling
