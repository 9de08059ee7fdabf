// The cluster sampling kernels' exchanges without a cluster barrier: SliceScopeOf's reductions, the
// draw's totals and the searches' histograms, share totals and crossings (row_scope.cuh), and the
// list kernels' lists (cluster_local_top_k.cuh). A cluster barrier with its default release /
// acquire semantics compiles to MEMBAR.ALL.GPU, ERRBAR, the barrier and CCTL.IVALL, and on an H100
// took 1316-1430 cycles a step in clusters of 4-16 where a relaxed arrive and wait took 112-116
// (dev/bench_cluster_sync.cu; history/cluster-sync-c5c5093-h100.txt): the GPU-scope fence is the
// cost, not the barrier. Here each push is an st.async into the peer's slot that completes on the
// peer's mbarrier (complete_tx, release at cluster scope), and a CTA waits on its own mbarrier
// (acquire at cluster scope) until every peer's push has landed: no fence in the SASS (STAS,
// SYNCS.ARRIVE.TRANS64, SYNCS.PHASECHK.TRANS64.TRYWAIT). One exchange of 8 bytes a CTA took 356 /
// 482 / 680 cycles in clusters of 4 / 8 / 16 against 1387 / 1527 / 1684 by push and cluster.sync
// (history/cluster-sync-async-746f6e3-h100.txt), and the samplers that exchange this way (top-p by
// rejection, min-p, plain) took 0.79-0.91x the time at 1-64 rows of 32000 and 128256, every other
// slice kernel 0.94-1.00x, the same tokens (H100, A B A B in one machine start;
// history/ab-sampling-async-push-746f6e3-h100.txt).
//
// Two mbarriers, one per slot set; exchange e (counted by the caller, the same in every thread
// of the cluster: every exchange is made by every thread of every CTA) uses set e & 1 and
// waits for that barrier's phase (e >> 1) & 1. Why a slot set can be written again: a CTA
// pushes into set s at exchange e + 2 only after every peer's push of exchange e + 1 reached
// it, and each peer pushed that after a block barrier that follows every read of its set s
// from exchange e. The block barrier at each exchange's start is also what makes an exchange
// order everything before it in every CTA before everything after it in every CTA, as the
// cluster barrier it replaces did (a CTA passes only once every peer's threads have reached
// it), so the other cluster protocols' reasoning (row_scope.cuh) is unchanged. A CTA exits
// only after its last exchange has received every push into it, so none lands after.
// One rule: every byte that crosses to a peer travels in an st.async / red.async that
// completes the receiver's phase. A plain remote store (st.shared::cluster) before an exchange
// is not known to have landed when the exchange completes (the block barrier is CTA-scope,
// and no fence follows it), so it would need the cluster barrier's release; the sampling
// kernels have none left (softmax_cluster.cuh's pinned-only kernel keeps its remote stores
// and cluster barriers).
#pragma once

#include <cstdint>
#include <cstring>

namespace aotinfer::sampling {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// This CTA's two mbarriers (one shared-memory instance a kernel).
__device__ __forceinline__ std::uint64_t* push_barriers() {
  __shared__ std::uint64_t bars[2];
  return bars;
}

// By every thread, before the cluster barrier phase that tells the peers this CTA runs
// (announce_push_barriers: fence.mbarrier_init publishes the initialisation to the cluster).
__device__ __forceinline__ void init_push_barriers() {
  if (threadIdx.x == 0) {
    const std::uint32_t b = shared_address(push_barriers());
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b + 8u) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}

// The shared::cluster address of p (this CTA's shared memory) in CTA `peer`.
__device__ __forceinline__ std::uint32_t peer_address(const void* p, unsigned peer) {
  std::uint32_t a;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(shared_address(p)), "r"(peer));
  return a;
}

// By every thread, at the start of a kernel that pushes: init_push_barriers, then an arrive on
// the cluster barrier's phase whose wait (the caller's, after its loads) tells a CTA that its
// peers run and their push barriers are initialised, before it pushes. The arrive is relaxed:
// init_push_barriers' fence orders the barriers' initialisation, nothing else written before
// it is read by a peer, and a release would put a GPU-scope fence (~1.2k cycles on an H100)
// before the caller's loads.
__device__ __forceinline__ void announce_push_barriers() {
  init_push_barriers();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// v (4 bytes or a multiple of 8) into `slot` (this CTA's address of it) in CTA `peer`,
// completing on the peer's barrier `set`.
template <typename V>
__device__ __forceinline__ void push_async(V* slot, unsigned peer, const V& v, unsigned set) {
  static_assert(sizeof(V) == 4 || sizeof(V) % 8 == 0, "pushed in 4- or 8-byte words");
  const std::uint32_t remote_slot = peer_address(slot, peer), remote_bar = peer_address(push_barriers() + set, peer);
  if constexpr (sizeof(V) == 4) {
    std::uint32_t w;
    std::memcpy(&w, &v, 4);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote_slot),
                 "r"(w), "r"(remote_bar)
                 : "memory");
  } else {
    std::uint64_t w[sizeof(V) / 8];
    std::memcpy(w, &v, sizeof(V));
#pragma unroll
    for (unsigned i = 0; i < sizeof(V) / 8; ++i) {
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(remote_slot +
                                                                                                      8u * i),
                   "l"(w[i]), "r"(remote_bar)
                   : "memory");
    }
  }
}

// Adds v to `slot` (this CTA's address of it) in CTA `peer` (red.async, u32 or u64),
// completing on the peer's barrier `set` with sizeof(v) bytes. Integer adds: the same sums in
// any order.
template <typename V>
__device__ __forceinline__ void add_async(V* slot, unsigned peer, V v, unsigned set) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "u32 or u64 adds");
  const std::uint32_t remote_slot = peer_address(slot, peer), remote_bar = peer_address(push_barriers() + set, peer);
  if constexpr (sizeof(V) == 4) {
    asm volatile(
        "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], %1, [%2];" ::"r"(
            remote_slot),
        "r"(static_cast<std::uint32_t>(v)), "r"(remote_bar)
        : "memory");
  } else {
    asm volatile(
        "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u64 [%0], %1, [%2];" ::"r"(
            remote_slot),
        "l"(static_cast<std::uint64_t>(v)), "r"(remote_bar)
        : "memory");
  }
}

// Exchange e's end, by every thread: thread 0 arrives expecting `bytes` (every push into this
// CTA's set), and every thread waits for the phase to complete.
__device__ __forceinline__ void wait_for_pushes(unsigned e, unsigned bytes) {
  const std::uint32_t bar = shared_address(push_barriers() + (e & 1u));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  }
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_PUSHES:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_PUSHES;\n}" ::"r"(bar),
      "r"((e >> 1) & 1u)
      : "memory");
}

// One exchange: a block barrier, then `pushes` threads push v into slot `slot` of set e & 1
// of CTA `peer`, then every thread waits for the `bytes` pushed into this CTA. Returns the set.
template <typename V, int kSlots>
__device__ __forceinline__ unsigned exchange_async(unsigned e, V (&slots)[2][kSlots], unsigned slot, unsigned peer,
                                                   bool pushes, const V& v, unsigned bytes) {
  __syncthreads();
  const unsigned set = e & 1u;
  if (pushes) push_async(&slots[set][slot], peer, v, set);
  wait_for_pushes(e, bytes);
  return set;
}
#endif

}  // namespace aotinfer::sampling
