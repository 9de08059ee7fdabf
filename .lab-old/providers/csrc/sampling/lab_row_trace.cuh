// A lab (dev/trace_rejection_rows.py, dev/lab_trace_rejection.sh): built with
// -DAOTINFER_LAB_ROW_TRACE, the rejection row kernels (top_p_rejection.cuh) print one line per
// row with its timeline; without it, LAB_TRACE(...) compiles to nothing. It measured what a
// round costs beside round 0's pass (dev/NOTES.md item 74). Below it, the slice kernels' phase
// trace (AOTINFER_LAB_SLICE_TRACE).
#pragma once

#if defined(AOTINFER_LAB_ROW_TRACE) || defined(AOTINFER_LAB_SLICE_TRACE)
#include <cstdio>
#endif

namespace aotinfer::sampling {

#ifdef AOTINFER_LAB_ROW_TRACE
// Printed by thread 0 when the row returns: its SM, the global clock at entry and return
// (ns), SM cycles from entry to the return, to the end of round 0's pass and to the start of
// rounds 1-4; the exact test passes and the rejected rounds the bins settled.
struct LabRowTrace {
  unsigned long long g0 = 0, c0 = 0, pass0 = 0, round_at[4] = {};
  int exact = 0, settled = 0;
  __device__ static unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ void start() {
    g0 = global_ns();
    c0 = clock64();
  }
  __device__ void mark_pass0() { pass0 = clock64() - c0; }
  __device__ void mark_round(int r) {
    if (r > 0 && r <= 4) round_at[r - 1] = clock64() - c0;
  }
  __device__ void finish(int rounds) const {
    if (threadIdx.x != 0) return;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    printf("TRACE row %d sm %u g0 %llu g1 %llu end %llu pass0 %llu rounds %d exact %d settled %d at %llu %llu %llu %llu\n",
           blockIdx.x, smid, g0, global_ns(), clock64() - c0, pass0, rounds, exact, settled, round_at[0],
           round_at[1], round_at[2], round_at[3]);
  }
};
#define LAB_TRACE(stmt) stmt
#else
#define LAB_TRACE(stmt)
#endif

// A lab (dev/trace_slice_phases.py): built with -DAOTINFER_LAB_SLICE_TRACE, the slice kernels
// (slice_kernels.cuh) mark, in thread 0 of each CTA, the SM clock at their phases (0 entry,
// 1 slice loaded, 2 list bound t_c found, 3 listed, 4 past the list exchange's cluster
// barrier, 5 rank 0's t_k found in the list, 6 the slice bound's histogram filled) and print
// one line per CTA at its end: family, CTAs a SM, rank, SM, the global clock at entry (ns) and
// the cycles from entry to marks 1-4, to the end, then to marks 5 and 6 (0: not reached).
// Top-p by rejection (top_p_rejection.cuh, in a cluster) marks round 0's steps instead: 2 its
// pass over the slice, 3 its draw (the cluster's push of totals and largest keys), 4 the drawn
// key's reduce across the cluster, 5 the test pass, 6 the test's reduce.
#ifdef AOTINFER_LAB_SLICE_TRACE
constexpr int kLabRejectionPass0 = 2, kLabRejectionDraw0 = 3, kLabRejectionPivot0 = 4, kLabRejectionTest0 = 5,
              kLabRejectionTested0 = 6;
__device__ __forceinline__ unsigned long long* lab_slice_marks() {
  __shared__ unsigned long long marks[8];  // [7]: the global clock at entry
  return marks;
}
__device__ __forceinline__ void lab_slice_mark(int i) {
  if (threadIdx.x == 0) lab_slice_marks()[i] = clock64();
}
__device__ __forceinline__ void lab_slice_start() {
  if (threadIdx.x != 0) return;
  unsigned long long* m = lab_slice_marks();
  for (int i = 1; i < 7; ++i) m[i] = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(m[7]));
  m[0] = clock64();
}
__device__ __forceinline__ void lab_slice_print(int family, int ctas_per_sm, int rank) {
  if (threadIdx.x != 0) return;
  const unsigned long long* m = lab_slice_marks();
  const unsigned long long end = clock64();
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  auto d = [&](int i) { return m[i] ? m[i] - m[0] : 0ull; };
  printf("SLICE %d %d %d %u %llu %llu %llu %llu %llu %llu %llu %llu\n", family, ctas_per_sm, rank, smid, m[7], d(1),
         d(2), d(3), d(4), end - m[0], d(5), d(6));
}
#define LAB_SLICE(stmt) stmt
#else
#define LAB_SLICE(stmt)
#endif

}  // namespace aotinfer::sampling
