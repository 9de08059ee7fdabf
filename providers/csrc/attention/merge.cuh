// Merging attention states (output, base-2 LSE): the split-KV combine and the public
// merge_states / merge_state_in_place. A state (o, s) stands for sum_j 2^(x_j) v_j / 2^s with
// s = log2 sum_j 2^(x_j); merging weights each state by 2^(s_i - max_i s_i).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/pdl.cuh"
#include "kv_types.cuh"

namespace aotinfer::attention {

constexpr int kMergeThreads = 128;

// The base of the exponentials of an online softmax or a merge whose running max is m (both
// decode kernels, the tensor-core kernel's merge of its warps' rows, the merges here): m
// itself, or 0 while every logit or state seen is masked or empty (m = -inf), so that
// p = exp2(x - base) and alpha = exp2(m_old - base) are 0 there without a branch around them.
// Not a branch that skips the exponentials: fmaxf drops NaN, so a row whose visible logits are
// all NaN (a NaN in q) keeps m = -inf, and its NaN must still reach l and the output through
// exp2f(NaN - 0).
__device__ __forceinline__ float softmax_base(float m) { return m == -INFINITY ? 0.f : m; }

template <typename TIn, typename TOut>
struct MergeParams {
  const TIn* v;        // (N, S, H, D) with strides below
  std::int64_t v_stride_n, v_stride_s, v_stride_h;
  const float* s;      // (N, S, H) with strides below
  std::int64_t s_stride_n, s_stride_s, s_stride_h;
  TOut* v_out;         // (N, H, D)
  std::int64_t o_stride_n, o_stride_h;
  float* s_out;        // (N, H) contiguous or nullptr
  std::int64_t n, num_states, heads, dim;
  const float* sinks;  // (H) natural-log sink logits or nullptr
  float v_scale;
};

// The end of a merge: given the largest state LSE m (base 2) and denom = sum_i 2^(s_i - m),
// the factor that turns sum_i 2^(s_i - m) v_i into the output (v_scale / denominator, a
// head's sink logit joining the denominator) and the merged base-2 LSE.
struct MergedRow {
  float inv, lse;
};

// The base-2 LSE of a row (or state) of largest logit m and denominator l = sum 2^(s - m):
// -inf for an empty row (l = 0), NaN where a NaN logit made l NaN, as in the reference
// (reference/attention.py): a test of l > 0 would give such a row an empty row's -inf beside
// its NaN output, and a cluster merge would then drop the state as empty.
__device__ __forceinline__ float row_lse(float m, float l) { return l != 0.f ? m + log2f(l) : -INFINITY; }

__device__ __forceinline__ MergedRow merged_row(float m, float denom, const float* sinks, std::int64_t h,
                                                float v_scale) {
  MergedRow r{0.f, row_lse(m, denom)};
  float total = denom;  // in units of 2^m
  if (sinks) {
    const float sink2 = sinks[h] * 1.4426950408889634f;
    if (denom != 0.f) {  // NaN too: the sink keeps it NaN
      total = denom + exp2f(sink2 - m);
      r.lse = m + log2f(total);
    } else {
      r.lse = sink2;
    }
  }
  r.inv = total > 0.f ? v_scale / total : 0.f;
  return r;
}

// A running merge of states, V columns wide: max LSE m (base 2), l = sum 2^(s_i - m) and
// acc[c] = sum 2^(s_i - m) v_i[c].
//
// Why batches: a merge sits on the critical path of every split decode and its work is a few
// loads per state, so its time is the number of memory round trips in a row. absorb() takes
// kMergeBatch states whose loads were all issued before it (unconditional loads from
// clamped addresses, no branch between them), so a batch costs one round trip. Measured on
// an H200 against the loops it replaced (three passes over the states, one thread per
// column): merge_states of 32 states 9.1 -> 2.7 us, single decode of 32768 keys (32 splits)
// 48.6 -> 39.1 us. Folding each state in as soon as it is loaded, with a branch on a new
// maximum, let the compiler issue one state's loads at a time: 1.5x slower than the three
// passes (dev/NOTES.md item 40).
constexpr int kMergeBatch = 8;
template <int V>
struct MergeAccum {
  float m = -INFINITY, l = 0.f, acc[V] = {};

  // Folds in states k < kMergeBatch with LSE s[k] and values v[k]; s[k] = -inf is an empty
  // state (its values are never multiplied in, so garbage there cannot turn into NaN).
  __device__ __forceinline__ void absorb(const float (&s)[kMergeBatch], const float (&v)[kMergeBatch][V]) {
    float mx = m;
#pragma unroll
    for (int k = 0; k < kMergeBatch; ++k) mx = fmaxf(mx, s[k]);
    const float base = softmax_base(mx);
    const float rescale = exp2f(m - base);  // 0 while nothing was absorbed (m = -inf)
    l *= rescale;
#pragma unroll
    for (int c = 0; c < V; ++c) acc[c] *= rescale;
#pragma unroll
    for (int k = 0; k < kMergeBatch; ++k) {
      const float w = exp2f(s[k] - base);
      l += w;
#pragma unroll
      for (int c = 0; c < V; ++c) acc[c] += s[k] == -INFINITY ? 0.f : w * v[k][c];
    }
    m = mx;
  }

  // Absorbs states begin, begin + step, ... below count, kMergeBatch per memory round trip:
  // load(i, v) returns state i's LSE and fills its V columns into v. Every slot of a batch is
  // loaded (a slot past the last state loads the last one and counts as empty), so no branch
  // separates the loads of a batch.
  template <typename Index, typename Load>
  __device__ __forceinline__ void absorb_states(Index begin, Index step, Index count, Load load) {
    for (Index i0 = begin; i0 < count; i0 += step * kMergeBatch) {
      float sk[kMergeBatch], vk[kMergeBatch][V];
#pragma unroll
      for (int k = 0; k < kMergeBatch; ++k) {
        const Index i = i0 + k * step;
        const float x = load(i < count ? i : count - 1, vk[k]);
        sk[k] = i < count ? x : -INFINITY;
      }
      absorb(sk, vk);
    }
  }
};

// V consecutive elements of T at p as floats; V = 4 is one 16-byte (float) or 8-byte
// (16-bit T) access, so p must be aligned to V elements.
template <typename T, int V>
__device__ __forceinline__ void load_cols(float (&out)[V], const T* p) {
  if constexpr (V == 4 && sizeof(T) == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  } else if constexpr (V == 4) {
    struct alignas(8) Four {
      T e[4];
    };
    const Four x = *reinterpret_cast<const Four*>(p);
#pragma unroll
    for (int c = 0; c < 4; ++c) out[c] = to_f32(x.e[c]);
  } else {
#pragma unroll
    for (int c = 0; c < V; ++c) out[c] = to_f32(p[c]);
  }
}

// One CTA per (n, h). Warp w merges states w, w + 4, w + 8, ... (kMergeBatch of them per
// round trip), each lane V adjacent columns of a 32 V-column pass; the four warps' states
// then merge through shared memory. V = 4 where the launcher finds D and the strides
// multiples of 4 and the base aligned (merge_dispatch), else 1.
constexpr int kMergeWarps = kMergeThreads / 32;
template <typename TIn, typename TOut, int V>
__global__ void __launch_bounds__(kMergeThreads) merge_states_kernel(const __grid_constant__ MergeParams<TIn, TOut> p) {
  __shared__ float warp_ml[kMergeWarps][2];
  __shared__ float warp_acc[kMergeWarps][32 * V];
  pdl_wait_for_prior_grid();  // after a split decode launched with PDL: its partials are complete
  // The next kernel (the next layer's decode, under PDL) may launch now and wait for our
  // results in its own griddepcontrol.wait: its launch latency hides behind this merge.
  // Measured at batch 1 x 1024 (graph of 10 calls): 9.15 -> 8.7 us per call.
  pdl_launch_dependents();
  const std::int64_t n = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* s = p.s + n * p.s_stride_n + h * p.s_stride_h;
  const TIn* v = p.v + n * p.v_stride_n + h * p.v_stride_h;
  for (std::int64_t c0 = 0; c0 < p.dim; c0 += 32 * V) {
    // Loads are unconditional (a lane past the last column reads column 0, a slot past the
    // last state reads the last state, then counts as empty): no branch between them.
    const std::int64_t c = c0 + lane * V < p.dim ? c0 + lane * V : 0;
    MergeAccum<V> st;
    st.absorb_states(std::int64_t{warp}, std::int64_t{kMergeWarps}, p.num_states,
                     [&](std::int64_t at, float (&cols)[V]) {
                       const float x = s[at * p.s_stride_s];
                       load_cols<TIn, V>(cols, v + at * p.v_stride_s + c);
                       return x;
                     });
    if (lane == 0) warp_ml[warp][0] = st.m, warp_ml[warp][1] = st.l;
#pragma unroll
    for (int j = 0; j < V; ++j) warp_acc[warp][lane * V + j] = st.acc[j];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < 32 * V && c0 + t < p.dim) {
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kMergeWarps; ++w) mx = fmaxf(mx, warp_ml[w][0]);
      const float base = softmax_base(mx);
      float denom = 0.f, x = 0.f;
#pragma unroll
      for (int w = 0; w < kMergeWarps; ++w) {
        const float f = exp2f(warp_ml[w][0] - base);
        denom += warp_ml[w][1] * f;
        x += warp_acc[w][t] * f;
      }
      // A NaN or +inf state LSE makes denom NaN (exp2f of NaN, or of inf - inf), and the public
      // rule (reference/cascade.py) makes v and s NaN: merged_row's LSE is NaN then (row_lse),
      // and v is set NaN here rather than left to x * inv (inv is 0 for a NaN total).
      const bool undefined = isnan(denom);
      const MergedRow mr = merged_row(mx, denom, p.sinks, h, p.v_scale);
      p.v_out[n * p.o_stride_n + h * p.o_stride_h + c0 + t] = from_f32<TOut>(undefined ? NAN : x * mr.inv);
      if (p.s_out && c0 == 0 && t == 0) p.s_out[n * p.heads + h] = mr.lse;
    }
    __syncthreads();  // warp_acc is rewritten by the next column pass
  }
  if (p.dim == 0 && p.s_out && threadIdx.x == 0) {  // no columns: the merged LSE alone
    MergeAccum<1> st;
    st.absorb_states(std::int64_t{0}, std::int64_t{1}, p.num_states, [&](std::int64_t at, float (&cols)[1]) {
      cols[0] = 0.f;
      return s[at * p.s_stride_s];
    });
    p.s_out[n * p.heads + h] = merged_row(st.m, st.l, p.sinks, h, p.v_scale).lse;  // NaN l: NaN
  }
}

template <typename T>
struct MergeInPlaceParams {
  T* v;  // (N, H, D), last dim contiguous
  std::int64_t v_stride_n, v_stride_h;
  float* s;  // (N, H) strides
  std::int64_t s_stride_n, s_stride_h;
  const T* v_other;
  std::int64_t vo_stride_n, vo_stride_h;
  const float* s_other;
  std::int64_t so_stride_n, so_stride_h;
  const bool* mask;  // (N,) or nullptr
  std::int64_t n, heads, dim;
};

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) merge_state_in_place_kernel(const __grid_constant__ MergeInPlaceParams<T> p) {
  const std::int64_t n = blockIdx.x, h = blockIdx.y;
  if (p.mask && !p.mask[n]) return;
  const float sa = p.s[n * p.s_stride_n + h * p.s_stride_h];
  const float sb = p.s_other[n * p.so_stride_n + h * p.so_stride_h];
  // The rules of merge_states (reference/cascade.py): an LSE of -inf weighs nothing and its v
  // is not read; a NaN or +inf LSE leaves no finite weights, so v and s become NaN (fmaxf
  // would drop a NaN and merge the other state as if it were alone).
  const bool undefined = isnan(sa) || isnan(sb) || sa == INFINITY || sb == INFINITY;
  const float m = fmaxf(sa, sb);
  const float wa = sa == -INFINITY ? 0.f : exp2f(sa - m), wb = sb == -INFINITY ? 0.f : exp2f(sb - m);
  const float total = wa + wb;
  __syncthreads();  // every thread read s before thread 0 overwrites it
  for (std::int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    T* va = p.v + n * p.v_stride_n + h * p.v_stride_h + d;
    const float a = to_f32(*va), bb = to_f32(p.v_other[n * p.vo_stride_n + h * p.vo_stride_h + d]);
    const float x = (sa == -INFINITY ? 0.f : a * wa) + (sb == -INFINITY ? 0.f : bb * wb);
    *va = from_f32<T>(undefined ? NAN : total > 0.f ? x / total : 0.f);
  }
  if (threadIdx.x == 0) {
    p.s[n * p.s_stride_n + h * p.s_stride_h] = undefined ? NAN : row_lse(m, total);
  }
}

}  // namespace aotinfer::attention
