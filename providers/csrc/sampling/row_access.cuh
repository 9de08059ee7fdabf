// Reading one row of a (rows, vocab) tensor in groups of four consecutive elements, the
// unit of both the 16/8-byte vector loads and the Philox generator (4 words per call).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace aotinfer::sampling {

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }

__device__ __forceinline__ void store_float(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_float(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_float(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
struct alignas(4 * sizeof(T)) Group4 {
  T v[4];
};

// Loads whole group g (4g + 3 < n) of an aligned row with one vector load, unchecked.
template <typename T>
__device__ __forceinline__ void load_whole_group4(const T* x, std::int64_t g, float (&v)[4]) {
  const Group4<T> q = reinterpret_cast<const Group4<T>*>(x)[g];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = load_float(&q.v[j]);
}

// Loads elements 4g .. 4g+3 of row x (length n) into v; missing tail elements get `fill`.
// `aligned`: the row start is aligned for a whole-group vector load.
template <typename T>
__device__ __forceinline__ void load_group4(const T* x, std::int64_t n, std::int64_t g, bool aligned,
                                            float fill, float (&v)[4]) {
  const std::int64_t base = 4 * g;
  if (aligned && base + 4 <= n) {
    load_whole_group4(x, g, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = base + j < n ? load_float(x + base + j) : fill;
  }
}

// Groups 0 .. whole_groups() - 1 of a row can be loaded by load_whole_group4: all of them
// when the row is aligned for vector loads, none otherwise.
__device__ __forceinline__ std::int64_t whole_groups(std::int64_t n, bool aligned) { return aligned ? n / 4 : 0; }

template <typename T>
__device__ __forceinline__ void store_group4(T* y, std::int64_t n, std::int64_t g, bool aligned,
                                             const float (&v)[4]) {
  const std::int64_t base = 4 * g;
  if (aligned && base + 4 <= n) {
    Group4<T> q;
#pragma unroll
    for (int j = 0; j < 4; ++j) store_float(&q.v[j], v[j]);
    reinterpret_cast<Group4<T>*>(y)[g] = q;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (base + j < n) store_float(y + base + j, v[j]);
  }
}

// The rest of for_each_group4 (below) loads up to kTailInFlight groups a thread before using
// the first. A round of kInFlight whole groups needs count >= kInFlight * blockDim.x (8 x 512
// groups for the cluster kernels' slice copy, load_slice), which no slice of a batch-1 or
// batch-16 row reaches (1 x 32000 in clusters of 8 is ~1000 groups a CTA, two a thread); one
// group at a time, such a slice loaded one DRAM round trip after the other. Measured as lab
// AOTINFER_LAB_SLICE_TAIL_IN_FLIGHT (session 58, H100, A B A B in one machine start, the same
// tokens; history/ab-sampling-slice-tail-in-flight-7366653-h100.txt): top-k, top-p, min-p,
// joint and top-k renorm 0.92-0.97x at 16 x 32000 and 0.89-0.99x at 1-16 x 128256, top-p
// and min-p 0.98-0.99x at 1-4 x 32000, the rest there 0.998-1.002x. The order of the f calls
// is the same, so are the slice and every result.
constexpr int kTailInFlight = 4;

// f(g, v) for groups g = first + threadIdx.x, first + threadIdx.x + blockDim.x, ... below
// first + count, in ascending g, with the elements of group g in v (tail elements = fill).
// kInFlight groups are loaded before the first of them is used, so that many loads per
// thread are in flight (latency hiding); the order of the f calls, and so any result
// accumulated in them, is the same as loading one group at a time. Rounds of whole groups
// (the row's body, when aligned) load without the per-group tail checks; the rest (the last
// round or two, or all of an unaligned row) with them, kTailInFlight groups at a time.
template <int kInFlight, typename T, typename F>
__device__ __forceinline__ void for_each_group4(const T* x, std::int64_t n, std::int64_t first,
                                                std::int64_t count, bool aligned, float fill, F&& f) {
  const std::int64_t end = first + count, step = blockDim.x;
  const std::int64_t whole_end = min(end, whole_groups(n, aligned));
  std::int64_t g = first + threadIdx.x;
  for (; g + (kInFlight - 1) * step < whole_end; g += kInFlight * step) {
    float v[kInFlight][4];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) load_whole_group4(x, g + u * step, v[u]);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) f(g + u * step, v[u]);
  }
  for (; g < end; g += kTailInFlight * step) {
    float v[kTailInFlight][4];
#pragma unroll
    for (int u = 0; u < kTailInFlight; ++u) {
      if (g + u * step < end) load_group4(x, n, g + u * step, aligned, fill, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kTailInFlight; ++u) {
      if (g + u * step < end) f(g + u * step, v[u]);
    }
  }
}

#ifdef AOTINFER_LAB_ROW_L2_PREFETCH
// Lab (session 63): asks the TMA unit to bring groups [first, end) of row x into L2 (one
// bulk prefetch, no registers, nothing waits on it), rounded inward to 16-byte bounds. The
// row kernels at 128 rows are one CTA of 1024 threads a SM whose passes load four groups a
// thread, then use them: ncu put 42% of top-p renorm's stall samples on the first use of
// the loaded values at 60% of DRAM's peak, so its rounds wait on DRAM latency.
template <typename T>
__device__ __forceinline__ void prefetch_groups_to_l2(const T* x, int first, int end) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (end <= first) return;
  const std::uint64_t lo = (__cvta_generic_to_global(x + 4 * static_cast<std::int64_t>(first)) + 15) & ~std::uint64_t{15};
  const std::uint64_t hi = __cvta_generic_to_global(x + 4 * static_cast<std::int64_t>(end)) & ~std::uint64_t{15};
  if (hi <= lo) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(static_cast<std::uint32_t>(hi - lo))
               : "memory");
#endif
}
#endif

// for_each_group4 over a whole row (n elements), with the whole groups in ascending g or,
// when `descending`, in descending g; the rest (the partial last group, or all of an
// unaligned row) after them, ascending. A pass over a row that another pass has just read
// one way starts, going the other way, on the part of the row that pass left in L2. One loop
// for both directions (a signed stride) and 32-bit indices (the launchers take rows of at
// most 2^31 - 1 elements): a loop per direction inlines f twice as often (the two-search
// sampler's code grew 116 -> 152 KB), and 64-bit indices made the largest sampling kernels
// spill (up to 36 B). for_each_group4 above stays for the cluster kernels' slice copy (a
// range of the row, ascending): this loop in its place changed their code, unmeasured.
template <int kInFlight, typename T, typename F>
__device__ __forceinline__ void for_each_group4_toward(bool descending, const T* x, int n, bool aligned, float fill,
                                                       F&& f) {
  const int groups = (n + 3) / 4, step = blockDim.x, mine = threadIdx.x;
  const int whole_end = aligned ? n / 4 : 0;
  const int whole = mine < whole_end ? (whole_end - 1 - mine) / step + 1 : 0;  // this thread's
  const int stride = descending ? -step : step;
  int g = descending ? mine + (whole - 1) * step : mine, i = 0;
#ifdef AOTINFER_LAB_ROW_L2_PREFETCH
  // Round c of the loop below reads about groups [c R, (c + 1) R) of the whole ones (R =
  // kInFlight blockDim.x), counted from the top when descending; thread 0 prefetches the
  // round AOTINFER_LAB_ROW_L2_PREFETCH rounds ahead as each round starts.
  constexpr int kAhead = AOTINFER_LAB_ROW_L2_PREFETCH;
  const int round = kInFlight * step;
  auto prefetch_round = [&](int c) {
    if (threadIdx.x != 0) return;
    const int lo = descending ? whole_end - (c + 1) * round : c * round;
    prefetch_groups_to_l2(x, max(lo, 0), min(lo + round, whole_end));
  };
  for (int c = 1; c < kAhead; ++c) prefetch_round(c);
#endif
  for (; i + kInFlight <= whole; i += kInFlight, g += kInFlight * stride) {
#ifdef AOTINFER_LAB_ROW_L2_PREFETCH
    prefetch_round(i / kInFlight + kAhead);
#endif
    float v[kInFlight][4];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) load_whole_group4(x, g + u * stride, v[u]);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) f(g + u * stride, v[u]);
  }
  for (; i < whole; ++i, g += stride) {
    float v[4];
    load_whole_group4(x, g, v);
    f(g, v);
  }
  for (g = mine + whole * step; g < groups; g += step) {
    float v[4];
    load_group4(x, n, g, aligned, fill, v);
    f(g, v);
  }
}

template <typename T>
__device__ __forceinline__ bool group_aligned(const T* x) {
  return reinterpret_cast<std::uintptr_t>(x) % (4 * sizeof(T)) == 0;
}

}  // namespace aotinfer::sampling
