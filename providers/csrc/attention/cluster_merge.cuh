// The split-KV merge of one request through distributed shared memory (sm_90+): the splits
// of a (request, query-row block, KV head) run as one thread-block cluster (the launcher sets
// clusterDim.z = splits, at most kMaxClusterSplits), each CTA leaves its normalised partial
// rows and their LSE in its own shared memory, and after a cluster barrier the CTAs merge
// them by reading each other's shared memory, each CTA a share of the output columns.
//
// Why: at batch 1 the merge sits on the critical path of every call. The merge kernel waits
// for the whole decode grid and reads the partials back through L2; the in-grid merge adds a
// device-wide fence and an atomic round trip. Here the partials never leave the SMs: two
// cluster barriers and one round of DSMEM loads replace them. Measured on an H200 (CUDA
// graph of 10 calls over rotating caches, A B A B against the merge kernel): batch 1 x 1024
// (8 splits) 8.8 -> 8.1 us per call (dev/NOTES.md item 42).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "decode_common.cuh"
#include "merge.cuh"

namespace aotinfer::attention {

// A portable cluster holds at most 8 CTAs.
constexpr int kMaxClusterSplits = 8;

// Called by every thread of every CTA of the cluster after the CTA wrote its state:
// `part_o` its normalised partial rows ([row][head_dim] floats, 16-byte aligned) and
// `part_lse` their base-2 LSE (-inf: an empty split), both in its own shared memory.
template <typename QT, typename KVT>
__device__ __forceinline__ void merge_splits_in_cluster(const DecodeParams<QT, KVT>& p, const CtaWork& w,
                                                        const float* part_o, const float* part_lse,
                                                        int head_dim) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // release / acquire: every split's state is visible to the cluster
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  // Output quads (row, 4 columns) dealt over the cluster's threads, CTA by CTA.
  const int quads = head_dim / 4;
  const int items = w.rows * quads;
  for (int idx = rank * blockDim.x + threadIdx.x; idx < items; idx += splits * blockDim.x) {
    const int r = idx / quads, c = (idx % quads) * 4;
    MergeAccum<4> st;
    for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
      float sk[kMergeBatch], vk[kMergeBatch][4];
#pragma unroll
      for (int k = 0; k < kMergeBatch; ++k) {
        // Unconditional loads (a slot past the last split reads the last one, then counts as
        // empty): the batch's DSMEM loads are all in flight before the arithmetic.
        const int s = s0 + k < splits ? s0 + k : splits - 1;
        const float x = *cluster.map_shared_rank(part_lse + r, s);
        const float4 y = *reinterpret_cast<const float4*>(cluster.map_shared_rank(part_o + r * head_dim + c, s));
        sk[k] = s0 + k < splits ? x : -INFINITY;
        vk[k][0] = y.x, vk[k][1] = y.y, vk[k][2] = y.z, vk[k][3] = y.w;
      }
      st.absorb(sk, vk);
    }
    const std::int64_t gr = w.row0 + r, qi = gr / p.group, head = w.kv_head * p.group + gr % p.group;
    const std::int64_t row = w.b * p.q_len + qi;
    const MergedRow mr = merged_row(st.m, st.l, p.sinks, head, p.v_scale);
    QT* out = p.out + row * p.out_stride_row + head * p.out_stride_head + c;
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = from_f32<QT>(st.acc[i] * mr.inv);
    if (p.lse && c == 0) p.lse[row * p.num_qo_heads + head] = mr.lse;
  }
  cluster.sync();  // no CTA exits (freeing its shared memory) while another still reads it
#endif
}

}  // namespace aotinfer::attention
