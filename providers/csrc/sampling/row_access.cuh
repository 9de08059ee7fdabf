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
  for (; i + kInFlight <= whole; i += kInFlight, g += kInFlight * stride) {
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
