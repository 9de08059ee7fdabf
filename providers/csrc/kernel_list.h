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
};

}  // namespace aotinfer
