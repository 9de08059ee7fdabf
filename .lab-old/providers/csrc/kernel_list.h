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
    "softmax_cluster/float32",
    "softmax_cluster/float16",
    "softmax_cluster/bfloat16",
    "softmax_split/float32",
    "softmax_split/float16",
    "softmax_split/bfloat16",
    "softmax_split_cluster/float32",
    "softmax_split_cluster/float16",
    "softmax_split_cluster/bfloat16",
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
    "decode/d64/float16/float16",
    "decode/d64/float16/float8_e4m3fn",
    "decode/d64/float16/float8_e5m2",
    "decode/d64/bfloat16/bfloat16",
    "decode/d64/bfloat16/float8_e4m3fn",
    "decode/d64/bfloat16/float8_e5m2",
    "decode/d128/float16/float16",
    "decode/d128/float16/float8_e4m3fn",
    "decode/d128/float16/float8_e5m2",
    "decode/d128/bfloat16/bfloat16",
    "decode/d128/bfloat16/float8_e4m3fn",
    "decode/d128/bfloat16/float8_e5m2",
    "decode/d256/float16/float16",
    "decode/d256/float16/float8_e4m3fn",
    "decode/d256/float16/float8_e5m2",
    "decode/d256/bfloat16/bfloat16",
    "decode/d256/bfloat16/float8_e4m3fn",
    "decode/d256/bfloat16/float8_e5m2",
    "merge_states/float32",
    "merge_states/float16",
    "merge_states/bfloat16",
    "append_paged_kv_cache/float16",
    "append_paged_kv_cache/bfloat16",
    "append_paged_kv_cache/float32",
    "append_paged_kv_cache/float8_e4m3fn",
    "append_paged_kv_cache/float8_e5m2",
};

}  // namespace aotinfer
