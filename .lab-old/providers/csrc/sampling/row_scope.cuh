// Where a row kernel's elements live and how its threads combine results, so the filter
// passes (radix_threshold.cuh, filter_sample.cuh) are written once for two layouts:
//
// - RowScope: one CTA per row; every pass reads the row from global memory.
// - SliceScopeOf<kCtas> (sm_90+): the row split over a cluster of kCtas CTAs (kSliceCtas,
//   kWideSliceCtas or kNarrowSliceCtas), each holding its slice in shared memory, read from
//   global memory once; reductions and histograms combine across the cluster through
//   distributed shared memory. A pass then costs shared-memory bandwidth, and a batch of 128
//   rows keeps 1024 CTAs busy instead of 128.
//
// Both give every thread of every CTA the same results, in a fixed order (the same inputs
// always give the same bits).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "cluster_push.cuh"
#include "gather.cuh"
#include "row_access.cuh"

namespace aotinfer::sampling {

// A search level's crossing: the bin where the running count or mass reaches the target, and
// the counts and masses above it and in it (radix_threshold.cuh).
struct Crossing {
  std::uint32_t digit;
  std::uint64_t above_count, above_mass, bin_count, bin_mass;

  template <typename Sh>
  __device__ void write_to(Sh& sh) const {
    sh.digit = digit;
    sh.above_count = above_count;
    sh.above_mass = above_mass;
    sh.bin_count = bin_count;
    sh.bin_mass = bin_mass;
    sh.found = 1;
  }
};

// Histogram totals of the shares above this CTA's (higher bins) and of all shares.
struct ShareTotals {
  std::uint64_t higher_count, higher_mass, all_count, all_mass;
};

// kGather: what threshold searches may gather into shared memory (gather.cuh): every pass
// here reads global memory, so one pass instead of two saves a row's worth of DRAM. Only the
// kernels that use it compile it (its registers cost the others spills).
// kAlternates: whether the passes alternate their direction (next_pass_descending).
template <typename T, GatherMode kGather = GatherMode::kOff, bool kAlternates = true>
struct RowScope {
  static constexpr GatherMode kGathers = kGather;
  // radix_threshold's level 0 runs its own loop over the row (no prefix test, a constant
  // shift). At 128 and 512 rows: top-k sampling 1.4-3.1% faster, masking and top-k renorm
  // of 128256 1.5-2.2%, the rest within the run's drift of 1% (top-p renorm 0.999-1.014;
  // history/ab-sampling-peel-level0-9d33cbc.txt).
  static constexpr bool kPeelsLevel0 = true;
  static constexpr bool kSplitOverCluster = false;  // one CTA holds the row
  const T* x;
  std::int64_t n;
  bool aligned;
  // Each pass over the row runs the other way from the one before it (next_pass_descending),
  // so that it starts on what that pass left in L2: 128 rows of 128256 probabilities are
  // 66 MB against the H200's 50 MB of L2, and rows read ascending every time evict each
  // row's start before the next pass comes back to it. Every pass's results are
  // order-independent (integer histograms and sums, maxima, per-segment sums); the same
  // in every thread, since every thread of the CTA runs the same passes.
  mutable bool descending_ = false;

  __device__ RowScope(const T* row, std::int64_t length) : x(row), n(length), aligned(group_aligned(row)) {}

  // The direction of the next pass over the row (true: descending), and the one after it
  // the other way.
  __device__ bool next_pass_descending() const {
    if (!kAlternates) return false;
    const bool d = descending_;
    descending_ = !d;
    return d;
  }
  // f(g, v) for every group g (elements 4g .. 4g+3) this thread owns, in ascending or (see
  // next_pass_descending) descending g; tail elements = fill. Four loads per thread are in
  // flight (for_each_group4_toward): batch 128 is one CTA per SM, and one load in flight
  // per thread left the SM waiting on DRAM. Thread 0 prefetching the next round (or the one
  // after) into L2 by cp.async.bulk.prefetch did not help: one round ahead, top-p renorm
  // 0.99-1.04x, masking and top-k renorm 1.04-1.07x at 128 x 32000, the rest 0.99-1.01x at
  // 128 and 512 rows; two rounds ahead, top-p renorm 1.05-1.12x (lab
  // AOTINFER_LAB_ROW_L2_PREFETCH, session 63; history/ab-sampling-row-l2-prefetch-cf96413-h100.txt).
  template <typename F>
  __device__ void for_each_group(float fill, F&& f) const {
    for_each_group4_toward<4>(next_pass_descending(), x, static_cast<int>(n), aligned, fill, f);
  }
  // The groups this CTA holds, as local indices 0 .. local_groups() - 1 (the row's group
  // first_group() + g); load(g, v) reads one (tail elements NaN).
  __device__ std::int64_t local_groups() const { return (n + 3) / 4; }
  __device__ std::int64_t first_group() const { return 0; }
  __device__ void load(std::int64_t g, float (&v)[4]) const { load_group4(x, n, g, aligned, NAN, v); }
  // Local groups below this one can be read by load_whole (no tail checks).
  __device__ std::int64_t whole_local_groups() const { return whole_groups(n, aligned); }
  __device__ void load_whole(std::int64_t g, float (&v)[4]) const { load_whole_group4(x, g, v); }
  // Before a search level clears the histograms: the previous level's readers are done.
  template <typename Sh>
  __device__ void level_start(int, Sh&) const {
    __syncthreads();
  }
  // Before the histograms' memory is used for something else (the draw's segments).
  __device__ void reuse_histograms() const { __syncthreads(); }
  // Every thread, once a listing level 0 (head_bound_list.cuh) has read the whole row
  // (filter_sample.cuh's FillingRowScope starts its output there).
  __device__ void after_listing_read() const {}
  // The one thread that finds a level's crossing records it (publish_crossing shares it).
  template <typename Sh>
  __device__ void set_crossing(Sh& sh, const Crossing& c) const {
    c.write_to(sh);
  }
  // Once every thread has added to the histogram: the scan may read it (a cluster scope also
  // sums the CTAs' histograms here, and with want_top pushes what top_bin reads).
  template <typename Sh>
  __device__ void complete_histograms(Sh&, int, bool) const {
    __syncthreads();
  }
  // Level 0's 1 + highest non-empty bin (0: none), from the histogram once it is complete:
  // each thread looks through its bins of the scan (top down to bottom), then a reduction.
  template <typename Sh>
  __device__ std::uint32_t top_bin(const Sh& sh, int bins, int top, int bottom) const {
    std::uint32_t mine = 0;  // 1 + my highest bin with a participant
    for (int bin = top; bin >= bottom && mine == 0; --bin) {
      if (combined_count(sh, bin, bins) != 0) mine = static_cast<std::uint32_t>(bin) + 1;
    }
    return reduce(mine, MaxOp{}, 0u);
  }
  // The sum of `mine` over the CTAs before this one (rank order) and over all of them.
  __device__ void exclusive_across(std::uint64_t mine, std::uint64_t* before, std::uint64_t* total) const {
    *before = 0;
    *total = mine;
  }
  template <typename V, typename Op>
  __device__ V reduce(V v, Op op, V identity) const {
    return block_reduce(v, op, identity);
  }
  // reduce() of a value that is the same in every thread of the CTA.
  template <typename V, typename Op>
  __device__ V reduce_uniform(V v, Op) const {
    return v;
  }
  // The radix scan (radix_threshold.cuh): one CTA scans every bin of its own histogram.
  __device__ int share_first(int) const { return 0; }
  __device__ int share_last(int bins) const { return bins - 1; }
  template <typename Sh>
  __device__ std::uint64_t combined_count(const Sh& sh, int bin, int) const { return sh.count[bin]; }
  template <typename Sh>
  __device__ std::uint64_t combined_mass(const Sh& sh, int bin, int) const {
    return (static_cast<std::uint64_t>(sh.mass_hi[bin]) << 12) + sh.mass_lo[bin];
  }
  template <typename Sh>
  __device__ ShareTotals across(Sh&, std::uint64_t count, std::uint64_t mass) const {
    return ShareTotals{0, 0, count, mass};
  }
  // Whether a crossing was found (sh.digit ... then hold it).
  template <typename Sh>
  __device__ bool publish_crossing(Sh& sh) const {
    __syncthreads();
    return sh.found != 0;
  }
};

// Lab AOTINFER_LAB_FEWER_BARRIERS (dev/NOTES.md items 76, 79): what is left of it is
// cluster_local_top_k.cuh's rank 0 drawing from its list by warp 0 alone. Its other parts went
// with the barriers they dropped: a search's level 0 keeps its cluster barrier (the shares'
// clearing needs it: SliceScopeOf::level_start), and the list kernels' arrive / wait went when
// their lists became pushes (session 62). Measured as a whole in session 47
// (history/ab-sampling-fewer-barriers-7f4181d.txt): mixed, so not adopted.
#ifdef AOTINFER_LAB_FEWER_BARRIERS
constexpr bool kLabFewerBarriers = true;
#else
constexpr bool kLabFewerBarriers = false;
#endif

constexpr int kSliceCtas = 8;  // portable cluster size
// Non-portable clusters (sm_90 allows 16 where the GPU can place them): a row over 16 SMs,
// half a slice per CTA, for up to four rows of a large vocabulary; and clusters of 4 (twice
// the slice per CTA, half the barrier fan-in) for batches that fill the GPU. Which size a
// launch takes: sample_launch.cu's wanted_slice_ctas.
constexpr int kWideSliceCtas = 16;
constexpr int kNarrowSliceCtas = 4;
constexpr int kSliceThreads = 512;  // two CTAs per SM at vocab 128256 (64 KB slices)

// Groups of four floats in shared memory (groups `first` ... of the row, from `s`), read as
// the scopes read a row: a cluster CTA's slice (SliceScopeOf), or a list searched by one CTA
// (cluster_local_top_k.cuh's LocalScope). Tails are NaN (or 0), which no pass counts.
struct SharedGroups {
  const float4* s;
  std::int64_t groups;
  std::int64_t first;

  // Shared memory: every pass ascends.
  __device__ bool next_pass_descending() const { return false; }
  template <typename F>
  __device__ void for_each_group(float /*fill*/, F&& f) const {
    for (std::int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      const float4 q = s[g];
      float v[4] = {q.x, q.y, q.z, q.w};
      f(first + g, v);
    }
  }
  __device__ std::int64_t local_groups() const { return groups; }
  __device__ std::int64_t first_group() const { return first; }
  __device__ void load(std::int64_t g, float (&v)[4]) const {
    const float4 q = s[g];
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  }
  __device__ std::int64_t whole_local_groups() const { return groups; }  // the tail is filled
  __device__ void load_whole(std::int64_t g, float (&v)[4]) const { load(g, v); }
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // clusters: sm_90 and later
// The caller (a kernel launched with clusters of kCtas) has copied this CTA's slice,
// groups [first, first + groups) of the row, into shared memory, tail elements as NaN
// (which every probability pass ignores, as it does the fill of RowScope).
//
// Cluster barriers, and remote reads that wait on them, are the cost of a pass here (a search
// level across the cluster cost ~4.5 us at batch 1 against ~0.4 us of pass work per CTA). So
// what crosses CTAs travels by push: a CTA writes what its peers need into each peer's shared
// memory, and every CTA reads its own copy. Against the pull-style version (two barriers per
// reduction, remote reads after them): batch 1 and 16 1.04-1.34x faster, renormalisation most
// (history/ab-sampling-cluster-push-*.txt). The pushes are cluster_push.cuh's exchanges:
// st.async (values) and red.async (a search level's histogram bins, added into the share
// owners) completing on the receiver's mbarrier, with no cluster barrier, whose release
// (MEMBAR.ALL.GPU) cost ~1.2k of its ~1.35k cycles on an H100. An exchange is a barrier as the
// cluster's was (a block barrier first, and no CTA passes before every peer's push has landed),
// so a slot is written again only after an exchange that every reader passes after reading
// it, and no CTA is written after it exits (it waits for every push into it). The only cluster
// barrier left in a search is its level 0's (level_start). Measured against the same searches
// with cluster barriers (H100, A B A B in one machine start, the same tokens): top-p renorm,
// top-k renorm and top-k masking 0.81-0.94x at 1-64 rows of 32000 and 128256
// (history/ab-sampling-search-exchanges-c5fdb15-h100.txt); the reductions' exchanges before
// them, top-p, min-p and plain sampling 0.79-0.92x (history/ab-sampling-async-push-746f6e3-h100.txt).
template <int kCtas>
struct SliceScopeOf : SharedGroups {
  static constexpr GatherMode kGathers = GatherMode::kOff;  // the slice is in shared memory already
  // Level 0 peeled as RowScope's: before level 0 was branch-free this made these kernels (the
  // slice already in shared memory) 0.956-1.036x by case (history/ab-sampling-peel-level0-9d33cbc.txt);
  // branch-free and with fraction sums (add_to_level0), 0.94-1.00x for renormalisation,
  // masking and the top-k / top-p samplers at batch 1 and 16 (history/ab-sampling-slice-peel-e794967.txt).
  // The two-search sampler keeps level 0 in the shared loop (prob_filter).
  static constexpr bool kPeelsLevel0 = true;
  static constexpr bool kSplitOverCluster = true;
  static constexpr int kClusterCtas = kCtas;

  // Level 0 keeps a cluster barrier, after this CTA clears its shares: every peer must have
  // cleared its shares before anyone adds into them (complete_histograms), and a search's
  // shares are not known to be clear when it starts (the first search of a kernel; or one after
  // a search that returned before its last crossing's exchange, which clears them otherwise:
  // publish_crossing). Later levels need only the CTA's own barrier: a CTA's histograms are
  // read by itself alone, and its shares were cleared before the previous level's crossing.
  template <typename Sh>
  __device__ void level_start(int level, Sh& sh) const {
    if (level == 0) {
      clear_shares(sh);
      cooperative_groups::this_cluster().sync();
    } else {
      __syncthreads();
    }
  }
  // After a search or a reduction: only this CTA reads its histograms.
  __device__ void reuse_histograms() const { __syncthreads(); }
  __device__ void after_listing_read() const {}  // (no listing in the cluster kernels)
  // Threads below kCtas push v into their rank's slot of every CTA's pushed[set], and every
  // thread returns once this CTA's copies are complete (cluster_push.cuh's exchange: the set
  // is the exchange's, every slot array has two).
  template <typename V>
  __device__ unsigned push_round(V (&pushed)[2][kCtas], const V& v) const {
    const unsigned rank = cooperative_groups::this_cluster().block_rank();
    return exchange_async(exchanges++, pushed, rank, threadIdx.x, threadIdx.x < kCtas, v, kCtas * sizeof(V));
  }
  // `mine` is read in the threads below kCtas (warp 0: the draw's totals are warp 0's), and
  // pushed into every CTA (one exchange).
  __device__ void exclusive_across(std::uint64_t mine, std::uint64_t* before, std::uint64_t* total) const {
    __shared__ std::uint64_t pushed[2][kCtas];
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned rank = cluster.block_rank();
    const unsigned set = push_round(pushed, mine);
    std::uint64_t b = 0, t = 0;
#pragma unroll
    for (unsigned r = 0; r < kCtas; ++r) {
      const std::uint64_t v = pushed[set][r];
      if (r < rank) b += v;
      t += v;
    }
    *before = b;
    *total = t;
  }
  // exclusive_across with the CTAs' largest keys in the same push: *max_key is this CTA's on
  // the way in (read in warp 0), the cluster's on the way out (top_p_rejection.cuh: a
  // cluster's round 0 draw).
  struct PushedTotal {
    std::uint64_t total;
    std::uint32_t max_key;
  };
  __device__ void exclusive_across(std::uint64_t mine, std::uint64_t* before, std::uint64_t* total,
                                   std::uint32_t* max_key) const {
    __shared__ PushedTotal pushed[2][kCtas];
    const unsigned rank = cooperative_groups::this_cluster().block_rank();
    const unsigned set = push_round(pushed, PushedTotal{mine, *max_key});
    std::uint64_t b = 0, t = 0;
    std::uint32_t m = 0u;
#pragma unroll
    for (unsigned r = 0; r < kCtas; ++r) {
      const PushedTotal v = pushed[set][r];
      if (r < rank) b += v.total;
      t += v.total;
      m = max(m, v.max_key);
    }
    *before = b;
    *total = t;
    *max_key = m;
  }
  // The cluster's sums of a and b (top-p's test in clusters of 4: the masses above its two
  // pivots) with no block reduction: each warp's sums are pushed into a slot of their own in
  // every CTA, one exchange, and every warp adds the kCtas x 16 slots up (uint64: the same sums
  // in any order). reduce() takes a block reduction first (two block barriers), and b's sum
  // would take another reduce(). Which cluster sizes use it: top_p_rejection.cuh,
  // test_sums_by_warp_pushes.
  struct PushedPair {
    std::uint64_t a, b;
  };
  __device__ void sum_pair_by_warps(std::uint64_t a, std::uint64_t b, std::uint64_t* sum_a,
                                    std::uint64_t* sum_b) const {
    constexpr int kWarps = kSliceThreads / 32, kSlots = kCtas * kWarps;
    __shared__ PushedPair pushed[2][kSlots];
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    a = warp_reduce(a, SumOp{});
    b = warp_reduce(b, SumOp{});
    const unsigned lane = threadIdx.x & 31u, slot = cluster.block_rank() * kWarps + (threadIdx.x >> 5);
    const unsigned set = exchange_async(exchanges++, pushed, slot, lane, lane < static_cast<unsigned>(kCtas),
                                        PushedPair{a, b}, kSlots * sizeof(PushedPair));
    std::uint64_t x = 0, y = 0;
#pragma unroll
    for (int i = static_cast<int>(lane); i < kSlots; i += 32) {
      x += pushed[set][i].a;
      y += pushed[set][i].b;
    }
    *sum_a = warp_reduce(x, SumOp{});
    *sum_b = warp_reduce(y, SumOp{});
  }
  // cluster_push.cuh's exchanges so far (every exchange of this scope, and the list kernels'),
  // the same in every thread of the cluster (each call is made by all).
  mutable unsigned exchanges = 0;
  // The next exchange's number, after the block barrier that opens it (cluster_push.cuh), for
  // the exchanges that push more than exchange_async's one value a thread.
  __device__ unsigned open_exchange() const {
    const unsigned e = exchanges++;
    __syncthreads();
    return e;
  }
  // Each CTA's block result, pushed into its slot of every peer; after one exchange every CTA
  // combines its own copies in rank order (the same bits everywhere). Against the pull (warp
  // 0 reading the peers' results between two barriers): plain and min-p sampling 0.93-0.97x
  // at batch 1 and 16 (dev/NOTES.md item 57).
  template <typename V, typename Op>
  __device__ V reduce(V v, Op op, V identity) const {
    return reduce_uniform(block_reduce(v, op, identity), op);
  }
  // reduce() of a value that is the same in every thread of the CTA (the drawn key after a
  // draw): no block reduction first, so no block barrier, only the cluster's.
  template <typename V, typename Op>
  __device__ V reduce_uniform(V v, Op op) const {
    __shared__ V pushed[2][kCtas];
    const unsigned set = push_round(pushed, v);
    V all = pushed[set][0];
#pragma unroll
    for (int r = 1; r < kCtas; ++r) all = op(all, pushed[set][r]);
    return all;
  }
  // The radix scan, distributed: rank r sums bins [r * share, (r + 1) * share) over the
  // cluster's histograms (each bin read once per cluster, not once per CTA), scans them,
  // and the rank whose share holds the crossing publishes it.
  __device__ static int share_size(int bins) { return bins / kCtas; }
  __device__ int share_first(int bins) const {
    return static_cast<int>(cooperative_groups::this_cluster().block_rank()) * share_size(bins);
  }
  __device__ int share_last(int bins) const { return share_first(bins) + share_size(bins) - 1; }
  template <typename Sh>
  __device__ std::uint64_t combined_count(const Sh& sh, int bin, int bins) const {
    return sh.share_count[bin - share_first(bins)];
  }
  // Once this CTA's histogram is written, by every thread: each bin's count and mass added into
  // its owner's share, and with want_top this CTA's 1 + highest non-empty bin pushed into every
  // CTA's peer_top (top_bin: a reduction would take another exchange), one exchange. Against
  // a cluster barrier and the owners' remote reads of every peer's bins: 2230 against 3750
  // cycles a level in clusters of 8 on an H100, 2970 against 6040 in clusters of 16
  // (dev/bench_cluster_sync.cu, redcomb and pullcomb; history/cluster-sync-combine-c5fdb15-h100.txt).
  template <typename Sh>
  __device__ void complete_histograms(Sh& sh, int bins, bool want_top) const {
    const unsigned rank = cooperative_groups::this_cluster().block_rank();
    std::uint32_t top = 0;
    __syncthreads();  // this CTA's histogram is complete (and the exchange's opening barrier)
    if (want_top) {
      for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        if (sh.count[b] != 0) top = static_cast<std::uint32_t>(b) + 1;
      }
      top = block_reduce(top, MaxOp{}, 0u);
    }
    // (Counted here, not by open_exchange: its barrier is the one above, before the top's
    // reduction. Counting first made ptxas schedule these kernels otherwise.)
    const unsigned e = exchanges++, set = e & 1u;
    const int share = share_size(bins);
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
      const unsigned owner = static_cast<unsigned>(b / share);
      const int i = b - static_cast<int>(owner) * share;
      add_async(&sh.share_count[i], owner, sh.count[b], set);
      add_async(&sh.share_mass[i], owner, (static_cast<std::uint64_t>(sh.mass_hi[b]) << 12) + sh.mass_lo[b], set);
    }
    if (want_top && threadIdx.x < kCtas) push_async(&sh.peer_top[rank], threadIdx.x, top, set);
    wait_for_pushes(e, static_cast<unsigned>(bins) * 12u + (want_top ? 4u * kCtas : 0u));
  }
  // Zeroes this CTA's shares for the next level's adds (before an exchange or barrier that
  // every peer passes before it adds; after this CTA's last read of them).
  template <typename Sh>
  __device__ void clear_shares(Sh& sh) const {
    for (int i = threadIdx.x; i < share_size(Sh::kBins); i += blockDim.x) {
      sh.share_count[i] = 0u;
      sh.share_mass[i] = 0u;
    }
  }
  template <typename Sh>
  __device__ std::uint64_t combined_mass(const Sh& sh, int bin, int bins) const {
    return sh.share_mass[bin - share_first(bins)];
  }
  // This CTA's share totals pushed into every CTA (one exchange); each sums its copies (same
  // order, same bits).
  struct PushedShare {
    std::uint64_t count, mass;
  };
  template <typename Sh>
  __device__ ShareTotals across(Sh&, std::uint64_t count, std::uint64_t mass) const {
    __shared__ PushedShare pushed[2][kCtas];
    const unsigned set = push_round(pushed, PushedShare{count, mass});
    return sum_share_totals(cooperative_groups::this_cluster().block_rank(),
                            [&](unsigned r) { return pushed[set][r]; });
  }
  // The share totals of the ranks above `rank` and of all, from rank r's copy(r). (Written
  // into across by hand, the same sums changed every slice kernel's SASS: session 63.)
  template <typename F>
  __device__ static ShareTotals sum_share_totals(unsigned rank, F&& copy) {
    ShareTotals t{0, 0, 0, 0};
#pragma unroll
    for (unsigned r = 0; r < kCtas; ++r) {
      const PushedShare v = copy(r);
      if (r > rank) {
        t.higher_count += v.count;
        t.higher_mass += v.mass;
      }
      t.all_count += v.count;
      t.all_mass += v.mass;
    }
    return t;
  }
  // Level 0's 1 + highest non-empty bin (0: none), from the CTAs' own, which
  // complete_histograms pushed.
  template <typename Sh>
  __device__ std::uint32_t top_bin(const Sh& sh, int, int, int) const {
    std::uint32_t top = 0;
#pragma unroll
    for (int r = 0; r < kCtas; ++r) top = max(top, sh.peer_top[r]);
    return top;
  }
  // The finder records the crossing in its own CTA; publish_crossing carries it to the others.
  template <typename Sh>
  __device__ void set_crossing(Sh& sh, const Crossing& c) const {
    c.write_to(sh);
  }
  struct PushedCrossing {
    std::uint64_t digit_found;  // digit | found << 32
    std::uint64_t above_count, above_mass, bin_count, bin_mass;
  };
  // Every CTA pushes what its own sh holds (found only in the finder's) into every CTA, one
  // exchange, and thread 0 of every other CTA copies the found one into its sh. Only the
  // pushing threads and thread 0 hold a record (a record in every thread, with a loop over all
  // of them, made ptxas spill 112-168 B in the renorm kernels). The shares are cleared before
  // the exchange, for the next level's adds.
  template <typename Sh>
  __device__ bool publish_crossing(Sh& sh) const {
    __shared__ PushedCrossing pushed[2][kCtas];
    // (The opening barrier: the finder's write_to is done, and this CTA's last reads of
    // pushed[set] and of its shares.)
    const unsigned e = open_exchange(), set = e & 1u;
    clear_shares(sh);
    if (threadIdx.x < kCtas) {
      const PushedCrossing mine{sh.digit | static_cast<std::uint64_t>(sh.found != 0) << 32, sh.above_count,
                                sh.above_mass, sh.bin_count, sh.bin_mass};
      push_async(&pushed[set][cooperative_groups::this_cluster().block_rank()], threadIdx.x, mine, set);
    }
    wait_for_pushes(e, kCtas * sizeof(PushedCrossing));
    if (threadIdx.x == 0 && sh.found == 0) {
      for (int r = 0; r < kCtas; ++r) {
        const PushedCrossing& c = pushed[set][r];
        if (c.digit_found >> 32) {
          Crossing{static_cast<std::uint32_t>(c.digit_found), c.above_count, c.above_mass, c.bin_count, c.bin_mass}
              .write_to(sh);
          break;
        }
      }
    }
    __syncthreads();
    return sh.found != 0;
  }
};
#endif

}  // namespace aotinfer::sampling
