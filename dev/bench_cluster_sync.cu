// What one cluster exchange costs on this card (a lab tool, GPU machine; no provider needed):
// one cluster per launch of kCtas CTAs of 512 threads (the slice kernels' shape), each
// repeating one step `iters` times, thread 0 of every CTA timing the loop with clock64. Steps:
//   sync      cluster.sync() alone (barrier.cluster.arrive.release + wait.acquire)
//   relaxed   barrier.cluster.arrive.relaxed + wait (no memory ordering)
//   push      threads below kCtas store 8 bytes into their slot of every peer, then sync and
//             read the slots (SliceScopeOf::reduce_uniform's shape)
//   reduce    a block reduction (two __syncthreads) before the push (SliceScopeOf::reduce)
//   warppush  every warp's lanes below kCtas push (sum_pair_by_warps' shape), sync, every warp
//             adds kCtas x 16 slots
//   block     __syncthreads() alone (the block barrier, for scale)
//   async     push's exchange by st.async into the peers' slots, completing on their mbarriers
//             (providers/csrc/sampling/cluster_push.cuh, lab AOTINFER_LAB_ASYNC_PUSH)
//   asyncwarp warppush's exchange the same way
//   pullcomb  a radix level's combine as the kernels run it: cluster.sync (every histogram of
//             2048 bins complete), then each CTA sums its share of the bins over every peer's
//             histogram by remote reads (SliceScopeOf::combine before session 62)
//   redcomb   the same sums by red.async adds into the share owners, completing on their
//             mbarriers (SliceScopeOf::complete_histograms, row_scope.cuh)
// dev/NOTES.md item 92: the phase trace of top-p at 1 x 32000 put ~2-3k cycles in each cluster
// exchange; this says how much of that is the barrier itself and how much the CTAs' skew.
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iproviders/csrc dev/bench_cluster_sync.cu -o /tmp/bcs && /tmp/bcs
#include <cooperative_groups.h>

#include <cstdio>
#include <cstdint>

#include "sampling/cluster_push.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 512;

enum Step { kSync, kRelaxed, kPush, kReduce, kWarpPush, kBlock, kAsync, kAsyncWarp, kPullCombine, kRedCombine, kSteps };
const char* const kNames[kSteps] = {"sync",  "relaxed", "push",      "reduce",   "warppush",
                                    "block", "async",   "asyncwarp", "pullcomb", "redcomb"};
constexpr int kBins = 2048;  // a radix level's histogram (radix_threshold.cuh)

template <int kCtas, Step kStep>
__global__ void __launch_bounds__(kThreads) exchange_loop(int iters, unsigned long long* cycles,
                                                          unsigned long long* sink) {
  __shared__ unsigned long long slots[2][kCtas * (kThreads / 32)];
  __shared__ unsigned long long partial[32];
  __shared__ unsigned hist_count[kBins];
  __shared__ unsigned long long hist_mass[kBins];
  __shared__ unsigned share_count[2][kBins / kCtas];
  __shared__ unsigned long long share_mass[2][kBins / kCtas];
  constexpr int kShare = kBins / kCtas;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  unsigned long long acc = threadIdx.x;
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    hist_count[b] = b + rank;
    hist_mass[b] = (static_cast<unsigned long long>(b) << 20) + rank;
  }
  for (int j = threadIdx.x; j < 2 * kShare; j += kThreads) {
    share_count[j / kShare][j % kShare] = 0;
    share_mass[j / kShare][j % kShare] = 0;
  }
  aotinfer::sampling::init_push_barriers();
  cluster.sync();  // every CTA is running (and its mbarriers are initialised)
  const unsigned long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
    const unsigned set = i & 1;
    if constexpr (kStep == kSync) {
      cluster.sync();
    } else if constexpr (kStep == kRelaxed) {
      asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    } else if constexpr (kStep == kBlock) {
      __syncthreads();
    } else if constexpr (kStep == kAsync) {
      aotinfer::sampling::exchange_async(i, slots, rank, threadIdx.x, threadIdx.x < kCtas, acc,
                                         kCtas * sizeof(unsigned long long));
      unsigned long long s = 0;
      for (int r = 0; r < kCtas; ++r) s += slots[set][r];
      acc += s;
    } else if constexpr (kStep == kAsyncWarp) {
      aotinfer::sampling::exchange_async(i, slots, rank * (kThreads / 32) + warp, lane, lane < kCtas, acc,
                                         kCtas * (kThreads / 32) * sizeof(unsigned long long));
      unsigned long long s = 0;
      for (int j = lane; j < kCtas * (kThreads / 32); j += 32) s += slots[set][j];
      acc += s;
    } else if constexpr (kStep == kPullCombine) {
      cluster.sync();
      for (int b = threadIdx.x; b < kShare; b += kThreads) {
        unsigned c = 0;
        unsigned long long m = 0;
#pragma unroll 8
        for (unsigned r = 0; r < kCtas; ++r) {
          c += cluster.map_shared_rank(hist_count, r)[rank * kShare + b];
          m += cluster.map_shared_rank(hist_mass, r)[rank * kShare + b];
        }
        share_count[0][b] = c;
        share_mass[0][b] = m;
      }
      __syncthreads();
      acc += share_mass[0][threadIdx.x % kShare] + share_count[0][threadIdx.x % kShare];
    } else if constexpr (kStep == kRedCombine) {
      __syncthreads();
      for (int b = threadIdx.x; b < kBins; b += kThreads) {
        const unsigned owner = b / kShare;
        const int j = b - static_cast<int>(owner) * kShare;
        aotinfer::sampling::add_async(&share_count[set][j], owner, hist_count[b], set);
        aotinfer::sampling::add_async(&share_mass[set][j], owner, hist_mass[b], set);
      }
      aotinfer::sampling::wait_for_pushes(i, kBins * 12u);
      acc += share_mass[set][threadIdx.x % kShare] + share_count[set][threadIdx.x % kShare];
      __syncthreads();  // every read of this set is done: zero it for the adds two steps on
      for (int j = threadIdx.x; j < kShare; j += kThreads) {
        share_count[set][j] = 0;
        share_mass[set][j] = 0;
      }
    } else if constexpr (kStep == kWarpPush) {
      if (lane < kCtas) *cluster.map_shared_rank(&slots[set][rank * (kThreads / 32) + warp], lane) = acc;
      cluster.sync();
      unsigned long long s = 0;
      for (int j = lane; j < kCtas * (kThreads / 32); j += 32) s += slots[set][j];
      acc += s;
    } else {
      unsigned long long v = acc;
      if constexpr (kStep == kReduce) {
        __syncthreads();
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        v = lane < kThreads / 32 ? partial[lane] : 0;
      }
      if (threadIdx.x < kCtas) *cluster.map_shared_rank(&slots[set][rank], threadIdx.x) = v;
      cluster.sync();
      unsigned long long s = 0;
      for (int r = 0; r < kCtas; ++r) s += slots[set][r];
      acc += s;
    }
  }
  const unsigned long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  if (acc == 42) *sink = acc;  // keeps the sums live
  cluster.sync();  // no CTA leaves while a peer may still push into it
}

template <int kCtas, Step kStep>
void run(int iters, unsigned long long* cycles, unsigned long long* sink) {
  auto kernel = exchange_loop<kCtas, kStep>;
  if (kCtas > 8) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  // One cluster: the grid is the cluster.
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {kCtas, 1, 1};
  cudaLaunchConfig_t config = {dim3(kCtas), dim3(kThreads), 0, nullptr, &attr, 1};
  unsigned long long host[16] = {};
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {  // the first launch warms up; the best of the rest
    cudaError_t err = cudaLaunchKernelEx(&config, kernel, iters, cycles, sink);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::printf("%-9s clusters of %2d: %s\n", kNames[kStep], kCtas, cudaGetErrorString(err));
      return;
    }
    cudaMemcpy(host, cycles, sizeof(unsigned long long) * kCtas, cudaMemcpyDeviceToHost);
    unsigned long long worst = 0;
    for (int c = 0; c < kCtas; ++c) worst = host[c] > worst ? host[c] : worst;
    if (rep > 0 && worst < best) best = static_cast<double>(worst);
  }
  std::printf("%-9s clusters of %2d: %7.1f cycles a step (slowest CTA, best of 4 launches)\n", kNames[kStep], kCtas,
              best / iters);
}

template <int kCtas>
void run_all(int iters, unsigned long long* cycles, unsigned long long* sink) {
  run<kCtas, kSync>(iters, cycles, sink);
  run<kCtas, kRelaxed>(iters, cycles, sink);
  run<kCtas, kPush>(iters, cycles, sink);
  run<kCtas, kReduce>(iters, cycles, sink);
  run<kCtas, kWarpPush>(iters, cycles, sink);
  run<kCtas, kBlock>(iters, cycles, sink);
  run<kCtas, kAsync>(iters, cycles, sink);
  run<kCtas, kAsyncWarp>(iters, cycles, sink);
  run<kCtas, kPullCombine>(iters, cycles, sink);
  run<kCtas, kRedCombine>(iters, cycles, sink);
}

int main() {
  const int iters = 1000;
  unsigned long long *cycles = nullptr, *sink = nullptr;
  cudaMalloc(&cycles, 16 * sizeof(unsigned long long));
  cudaMalloc(&sink, sizeof(unsigned long long));
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs; %d iterations a launch, %d threads a CTA\n", prop.name, prop.multiProcessorCount, iters,
              kThreads);
  run_all<4>(iters, cycles, sink);
  run_all<8>(iters, cycles, sink);
  run_all<16>(iters, cycles, sink);
  return 0;
}
