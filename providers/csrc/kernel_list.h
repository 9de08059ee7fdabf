// The kernel variants this source tree builds into every provider, as reported by
// build_info()["kernels"]. core/aotinfer/_dispatch.py holds the same table from the
// dispatcher's side; tests/gpu/test_provider_abi.py checks that the two agree, so a
// dispatch that selects an unbuilt variant cannot ship.
#pragma once

namespace aotinfer {

inline constexpr const char* kKernelList[] = {
    "softmax/float32",
    "softmax/float16",
    "softmax/bfloat16",
    "sample/float32",
    "renorm/float32",
    "renorm/float16",
    "renorm/bfloat16",
    "top_k_mask/float32",
    "top_k_mask/float16",
    "top_k_mask/bfloat16",
    "top_k_select/float32",
    "top_k_select/float16",
    "top_k_select/bfloat16",
    "chain_speculative/float32",
};

}  // namespace aotinfer
