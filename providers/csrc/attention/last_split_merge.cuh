// The split-KV merge done by the decode grid itself: the last CTA of a (request, query-row
// block, KV head) to finish its split merges every split's partial state into the output,
// so no merge kernel follows the decode. With several requests this merge overlaps other
// CTAs' streaming and measured faster than the merge kernel; a single request's CTAs finish
// together and the merge kernel, resident early under PDL, was faster there on the GPU, so
// for one request the core passes `arrivals` only to eager calls, whose time is the host's
// (one launch instead of two), and captures keep the merge kernel (figures in
// _decode_wrapper.py, _merges_in_grid and _eager_merges_in_grid). A request in 2..8 splits
// on sm_90+ merges in thread-block clusters instead of either (cluster_merge.cuh).
//
// Ordering: each CTA writes its partial rows, fences them device-wide and only then counts
// itself in (atomicAdd on the group's counter); the CTA that brings the count to the
// group's split count fences again and reads the others' partials from L2 (ld.global.cg:
// its own L1 never held them). It resets the counter to 0, so the buffer serves the next
// launch, a CUDA-graph replay included, without a memset.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "decode_common.cuh"
#include "merge.cuh"

namespace aotinfer::attention {

// The merge of merge_if_last_split: each thread V columns of one of the CTA's query rows over
// the request's `splits` splits, kMergeBatch splits per memory round trip (MergeAccum: loads
// first, then the arithmetic), read from L2 (ld.global.cg: its own L1 never held them).
template <int V, typename QT, typename KVT>
__device__ __forceinline__ void merge_rows(const DecodeParams<QT, KVT>& p, const CtaWork& w, int head_dim,
                                           std::int64_t splits) {
  static_assert(V % 4 == 0, "whole float4 loads");
  const int groups = head_dim / V;
  for (int idx = threadIdx.x; idx < w.rows * groups; idx += blockDim.x) {
    const int r = idx / groups, c = (idx % groups) * V;
    const std::int64_t gr = w.row0 + r, qi = gr / p.group, head = w.kv_head * p.group + gr % p.group;
    const std::int64_t row = w.b * p.q_len + qi;
    const std::int64_t first = (row * p.splits) * p.num_qo_heads + head;  // split 0's (row, head)
    // An empty split (window, or past the request's end) has LSE -inf: absorb skips it.
    MergeAccum<V> st;
    st.absorb_states(std::int64_t{0}, std::int64_t{1}, splits, [&](std::int64_t split, float (&cols)[V]) {
      const std::int64_t at = first + split * p.num_qo_heads;
      const float4* y = reinterpret_cast<const float4*>(p.partial_out + at * head_dim + c);
#pragma unroll
      for (int j = 0; j < V / 4; ++j) {
        const float4 v = __ldcg(y + j);
        cols[4 * j] = v.x, cols[4 * j + 1] = v.y, cols[4 * j + 2] = v.z, cols[4 * j + 3] = v.w;
      }
      return __ldcg(p.partial_lse + at);
    });
    store_merged(p, w, r, c, st);
  }
}

// Called by every thread of a CTA that wrote partial state (a split request, p.arrivals set)
// after its last partial write. `head_dim` is D.
template <typename QT, typename KVT>
__device__ __forceinline__ void merge_if_last_split(const DecodeParams<QT, KVT>& p, const CtaWork& w, int head_dim) {
  const std::int64_t row_blocks = (p.q_len * p.group + kRowBlock - 1) / kRowBlock;
  const std::int64_t splits = p.work ? p.split_counts[w.b] : p.splits;
  int* counter = p.arrivals + (w.b * row_blocks + w.row0 / kRowBlock) * p.num_kv_heads + w.kv_head;
  __threadfence();  // this CTA's partial rows are visible before it counts itself in
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == static_cast<int>(splits) - 1;
    if (last) *counter = 0;  // every split has counted in: ready for the next launch
  }
  // The verdict reaches every thread through the barrier, not through a __shared__ flag:
  // static shared memory would shift the kernels' dynamic tiles off their 128-byte swizzle
  // alignment (measured: every decode ~15% slower).
  if (!__syncthreads_or(last)) return;
  __threadfence();  // the other CTAs' partial rows are read after their counts

  // Each thread merges V columns of one query row over the splits (merge_rows). V = 8 where
  // 4 would leave a thread more than one row quad: this CTA merges alone while the others
  // have left, so its round trips are the tail of the request, and a CTA of 16 query rows (a
  // GQA group of 16) at d128 then takes two rounds of them per thread instead of four (H100,
  // 16/1 heads, 16 x 1024: 16.2 -> 14.6 us; 4 x 4096, 32 splits: 23.3 -> 20.3). Where every
  // quad has its thread, 8 columns made 32/8 heads 1% slower (one round either way).
  if (w.rows * (head_dim / 4) > static_cast<int>(blockDim.x)) {
    merge_rows<8>(p, w, head_dim, splits);
  } else {
    merge_rows<4>(p, w, head_dim, splits);
  }
}

}  // namespace aotinfer::attention
