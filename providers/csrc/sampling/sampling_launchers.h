// Host entry points of the sampling family, on framework-free views. Declared here so the
// binding file (compiled by the host compiler, with pybind11) never includes CUDA kernels.
#pragma once

#include <cstdint>

#include "../common/tensor_view.h"

namespace aotinfer::sampling {

// logits (B, V) float32/float16/bfloat16; probs (B, V) float32; temperature (B,) float32 or
// nullptr, in which case temperature_scalar applies to every row.
void launch_softmax(const TensorView& logits, const TensorView& probs,
                    const TensorView* temperature, float temperature_scalar, bool enable_pdl,
                    std::uintptr_t stream);

}  // namespace aotinfer::sampling
