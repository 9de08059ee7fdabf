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
    read float32 (the core casts), renorm / mask / top-k select keep the input's dtype."""
    out = ["sample/float32", "chain_speculative/float32"]
    for family in ("renorm", "top_k_mask", "top_k_select"):
        out += [f"{family}/{name}" for name in _DTYPE_NAMES.values()]
    return out


def all_variants() -> list:
    """Every variant some valid call can select."""
    return [softmax_variant(d) for d in _DTYPE_NAMES] + sampling_variants()
