"""The kernel variants the dispatcher can select, as named in a provider's
``build_info()["kernels"]`` (providers/csrc/kernel_list.h). A test compares the two, so a
dispatch to a variant that was not built cannot ship.
"""

from __future__ import annotations

import torch

_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def softmax_variant(logits_dtype: torch.dtype) -> str:
    return f"softmax/{_DTYPE_NAMES[logits_dtype]}"


def sampling_variants() -> list:
    """The sampling family (aotinfer._sampling_ops): samplers and chain speculative sampling
    read float32 (the core casts), and so does top-p renorm; top-k renorm, mask and top-k
    select keep the input's dtype (``renorm/float16`` is top-k renorm's)."""
    out = ["sample/float32", "chain_speculative/float32"]
    for family in ("renorm", "top_k_mask", "top_k_select"):
        out += [f"{family}/{name}" for name in _DTYPE_NAMES.values()]
    return out


def softmax_cluster_variants() -> list:
    """The one-read cluster softmax (sm_90+ rows of up to 256K, when pinned by
    AOTINFER_SOFTMAX_KERNEL=cluster)."""
    return [f"softmax_cluster/{name}" for name in _DTYPE_NAMES.values()]


def softmax_split_variants() -> list:
    """The split softmax (sm_90+ rows of at least 16K): the two-launch pair, and the one-launch
    form with a row's chunks in one cluster."""
    return [
        f"{family}/{name}"
        for family in ("softmax_split", "softmax_split_cluster")
        for name in _DTYPE_NAMES.values()
    ]


def decode_variants() -> list:
    """Decode attention (aotinfer.decode): head dim x query dtype x KV dtype (the query's,
    or fp8), the merge of attention states and the KV append (core/aotinfer/_decode_checks.py
    admits exactly these)."""
    out = []
    for head_dim in (64, 128, 256):
        for q in ("float16", "bfloat16"):
            for kv in (q, "float8_e4m3fn", "float8_e5m2"):
                out.append(f"decode/d{head_dim}/{q}/{kv}")
    out += [f"merge_states/{name}" for name in _DTYPE_NAMES.values()]
    out += [
        f"append_paged_kv_cache/{name}"
        for name in ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2")
    ]
    return out


def all_variants() -> list:
    """Every variant some valid call can select."""
    return (
        [softmax_variant(d) for d in _DTYPE_NAMES]
        + softmax_cluster_variants()
        + softmax_split_variants()
        + sampling_variants()
        + decode_variants()
    )
