// Host entry points of the sampling family, on framework-free views. Declared here so the
// binding file (compiled by the host compiler, with pybind11) never includes CUDA kernels.
//
// Conventions shared by every entry point:
// - Per-row parameters come as an optional view (one value per *source row* of the input,
//   i.e. indexed by indices[b] when indices are given) plus a scalar used when the view is
//   absent. top_k: int32; top_p, min_p: float32.
// - Randomness: seed and offset come as optional int64/uint64 views of length 1 or batch
//   (per output row) plus scalars used when the views are absent. The uniform for element
//   i of output row b is philox_uniform(seed_b, offset_b, b, stream, i) of philox.cuh,
//   which core/aotinfer/reference/philox.py reproduces bit for bit.
// - Outputs are written in full; nothing is allocated and the host never synchronises.
#pragma once

#include <cstdint>

#include "../common/tensor_view.h"

namespace aotinfer::sampling {

// logits (B, V) float32/float16/bfloat16; probs (B, V) float32; temperature (B,) float32 or
// nullptr, in which case temperature_scalar applies to every row. workspace: float32, at least
// 2 * B * ceil(V / 1024) elements (split_softmax_workspace_floats), 8-byte aligned; the split
// kernels keep one (max, sum) pair per row chunk there.
void launch_softmax(const TensorView& logits, const TensorView& probs,
                    const TensorView* temperature, float temperature_scalar,
                    const TensorView& workspace, bool enable_pdl, std::uintptr_t stream);

// Which tokens survive before sampling or renormalisation.
enum class FilterMode : int {
  kNone = 0,
  kTopK = 1,
  kTopP = 2,
  kMinP = 3,
  kTopKThenTopP = 4,  // top-p applied to the top-k renormalised distribution
  kJoint = 5,         // top-k and top-p both measured on the original distribution
};

struct FilterArgs {
  FilterMode mode = FilterMode::kNone;
  const TensorView* top_k = nullptr;  // (U,) int32
  std::int32_t top_k_scalar = 0;
  const TensorView* top_p = nullptr;  // (U,) float32
  float top_p_scalar = 1.f;
  const TensorView* min_p = nullptr;  // (U,) float32
  float min_p_scalar = 0.f;
};

struct RandomArgs {
  const TensorView* seed = nullptr;  // (1,) or (B,) int64/uint64
  std::uint64_t seed_scalar = 0;
  const TensorView* offset = nullptr;
  std::uint64_t offset_scalar = 0;
};

// Draws one token per output row b from row indices[b] (or b) of input (U, V) float32.
// input_is_logits: Gumbel-max over logits (filter must be kNone); otherwise the fixed-point
// inverse CDF (inverse_cdf.cuh) over the probabilities that survive the filter (implicitly
// renormalised).
// samples (B,) int32/int64; valid (B,) bool or nullptr: false for a row with no finite
// positive probability (its sample is 0).
void launch_sample(const TensorView& input, bool input_is_logits, const TensorView* indices,
                   const TensorView& samples, const TensorView* valid, const FilterArgs& filter,
                   const RandomArgs& random, std::uintptr_t stream);

// out (B, V) = input with tokens outside the top-k / top-p set zeroed and the rest divided
// by their mass. input float32/float16/bfloat16, out the same dtype.
void launch_renorm(const TensorView& input, const TensorView& out, const FilterArgs& filter,
                   std::uintptr_t stream);

// out (B, V) = logits with every token outside the top-k set -inf; same dtype as logits.
void launch_top_k_mask(const TensorView& logits, const TensorView& out, const FilterArgs& filter,
                       std::uintptr_t stream);

// The k largest entries of each row: values (B, k) input dtype, indices (B, k) int64, in
// ascending index order (the core sorts by value when asked). Ties at the k-th value are
// taken lowest index first.
void launch_top_k_select(const TensorView& input, std::int64_t k, const TensorView& values,
                         const TensorView& indices, std::uintptr_t stream);

// Chain speculative sampling: draft_probs (B, n, V), draft_ids (B, n) int32/int64,
// target_probs (B, n+1, V), all probs float32. out_ids (B, n+1) int32 (-1 after the first
// rejection); accepted and emitted (B,) int32 are added to, not overwritten.
void launch_chain_speculative(const TensorView& draft_probs, const TensorView& draft_ids,
                              const TensorView& target_probs, const TensorView& out_ids,
                              const TensorView& accepted, const TensorView& emitted,
                              const RandomArgs& random, std::uintptr_t stream);

}  // namespace aotinfer::sampling
