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
// Batches too (launch_prepared_decode, use_cluster_merge): a grid plan whose CTAs fit in one
// round, which the core gives uniform batches (_decode_plan.uniform_grid); there the last
// split's CTA would otherwise merge alone, one L2 round trip per few quads of its rows.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "decode_common.cuh"
#include "merge.cuh"

namespace aotinfer::attention {

// A portable cluster holds at most 8 CTAs.
// Clusters of up to 16 (non-portable, sm_90) were slower at 16 splits than the in-grid merge
// (batch 1 x 1024: 9.5 against 8.9 us; history/sweep-decode-cluster16-9d2e143-reverted.txt).
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
  // Output quads (row, 4 columns) dealt over the cluster's threads, CTA by CTA: a batch of
  // one's 128 quads fall to rank 0 alone. Dealt round-robin over the CTAs (each SM issuing
  // 1/splits of the remote loads) batch 1 x 1024 ran 8.1 -> 8.3 us (A/B,
  // history/ab-cluster-merge-dealing-bf5247e.txt; why was not measured).
  const int quads = head_dim / 4;
  const int items = w.rows * quads;
  for (int idx = rank * blockDim.x + threadIdx.x; idx < items; idx += splits * blockDim.x) {
    const int r = idx / quads, c = (idx % quads) * 4;
    MergeAccum<4> st;
    st.absorb_states(0, 1, splits, [&](int split, float (&cols)[4]) {
      const float x = *cluster.map_shared_rank(part_lse + r, split);
      const float4 y = *reinterpret_cast<const float4*>(cluster.map_shared_rank(part_o + r * head_dim + c, split));
      cols[0] = y.x, cols[1] = y.y, cols[2] = y.z, cols[3] = y.w;
      return x;
    });
    store_merged(p, w, r, c, st);
  }
  cluster.sync();  // no CTA exits (freeing its shared memory) while another still reads it
#endif
}

}  // namespace aotinfer::attention
