// Chain speculative sampling (speculative decoding with one draft chain per request).
//
// For request b and draft position j, draft token t is accepted when u * q < p, with
// q = draft_probs[b, j, t], p = target_probs[b, j, t] and u uniform (stream 1, element j):
// acceptance with probability min(1, p / q). At the first rejection j* the token is drawn
// from the residual max(target - draft, 0) of that position (exponential race, stream 2+j*);
// when every draft token is accepted, a bonus token is drawn from target_probs[b, n]. Output
// positions after the emitted token are -1. `accepted` counts every position that passes
// on its own (not stopping at the first rejection), `emitted` the draft tokens kept; both are
// added to the caller's counters.
#pragma once

#include <cstdint>

#include "../common/block_reduce.cuh"
#include "filter_sample.cuh"
#include "philox.cuh"
#include "row_access.cuh"

namespace aotinfer::sampling {

struct ChainSpeculativeParams {
  const float* draft_probs;   // (batch, n, vocab), contiguous
  const void* draft_ids;      // (batch, n) int32/int64, contiguous
  bool draft_ids_int64;
  const float* target_probs;  // (batch, n + 1, vocab), contiguous
  std::int32_t* out_ids;      // (batch, n + 1)
  std::int32_t* accepted;     // (batch,)
  std::int32_t* emitted;      // (batch,)
  std::int64_t batch, n, vocab;
  RandomParams random;
};

__global__ void __launch_bounds__(kRowThreads) chain_speculative_kernel(const __grid_constant__ ChainSpeculativeParams p) {
  __shared__ int first_reject_sh, accepted_sh;
  const std::int64_t b = blockIdx.x, n = p.n, V = p.vocab;
  auto draft_id = [&](std::int64_t j) -> std::int64_t {
    return p.draft_ids_int64 ? static_cast<const std::int64_t*>(p.draft_ids)[b * n + j]
                             : static_cast<const std::int32_t*>(p.draft_ids)[b * n + j];
  };
  if (threadIdx.x == 0) {
    const RowRandom accept_rng = p.random.for_row(b, 1);
    int first_reject = static_cast<int>(n), accepted = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t t = draft_id(j);
      bool ok = false;
      if (t >= 0 && t < V) {  // an out-of-range draft token is rejected, never read
        // NaN, negative or infinite probabilities act as 0, as everywhere in the family.
        float q = p.draft_probs[(b * n + j) * V + t];
        float tp = p.target_probs[(b * (n + 1) + j) * V + t];
        q = prob_key(q) ? q : 0.f;
        tp = prob_key(tp) ? tp : 0.f;
        ok = accept_rng.uniform(static_cast<std::uint64_t>(j)) * q < tp;
      }
      accepted += ok;
      if (!ok && first_reject == n) first_reject = static_cast<int>(j);
    }
    first_reject_sh = first_reject;
    accepted_sh = accepted;
  }
  __syncthreads();
  const int fr = first_reject_sh;

  // Race over the residual (or the bonus row): argmin E_i / w_i.
  const RowRandom rng = p.random.for_row(b, 2u + static_cast<std::uint32_t>(fr));
  const float* target = p.target_probs + (b * (n + 1) + fr) * V;
  const float* draft = fr < n ? p.draft_probs + (b * n + fr) * V : nullptr;
  ScoredIndex best{0.f, -1}, fallback{0.f, -1};
  const bool ta = group_aligned(target), da = draft ? group_aligned(draft) : false;
  for (std::int64_t g = threadIdx.x; g < (V + 3) / 4; g += blockDim.x) {
    float t4[4], d4[4] = {0.f, 0.f, 0.f, 0.f};
    load_group4(target, V, g, ta, 0.f, t4);
    if (draft) load_group4(draft, V, g, da, 0.f, d4);
    const Philox4 w = rng.words(static_cast<std::uint64_t>(g));
    const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (prob_key(t4[j]) == 0u) continue;
      const float e = RowRandom::exponential(words[j]);
      const ScoredIndex from_target{e / t4[j], 4 * g + j};
      if (better_min(from_target, fallback)) fallback = from_target;
      const float r = t4[j] - (prob_key(d4[j]) ? d4[j] : 0.f);
      if (r > 0.f) {
        const ScoredIndex c{e / r, 4 * g + j};
        if (better_min(c, best)) best = c;
      }
    }
  }
  best = block_argmin(best);
  fallback = block_argmin(fallback);
  if (threadIdx.x == 0) {
    // A residual of all zeros (draft == target) has probability 0 of being reached; draw from
    // the target then. A target row with nothing positive emits token 0.
    const std::int64_t token = best.index >= 0 ? best.index : (fallback.index >= 0 ? fallback.index : 0);
    for (std::int64_t j = 0; j <= n; ++j) {
      std::int32_t id = -1;
      if (j < fr) id = static_cast<std::int32_t>(draft_id(j));
      if (j == fr) id = static_cast<std::int32_t>(token);
      p.out_ids[b * (n + 1) + j] = id;
    }
    p.accepted[b] += accepted_sh;
    p.emitted[b] += fr;
  }
}

}  // namespace aotinfer::sampling
