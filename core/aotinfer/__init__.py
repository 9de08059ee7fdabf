"""aotinfer: FlashInfer-style GPU kernels for LLM serving, compiled ahead of time.

``import aotinfer as flashinfer`` works for the API covered here. Importing this package
loads no provider and initialises no CUDA: the provider for a device is found through the
entry-point group ``aotinfer.providers`` and imported the first time a CUDA tensor on that
device needs a kernel. CPU tensors run on the pure-PyTorch reference implementations.

The submodules load on first use (PEP 562 ``__getattr__``), so ``import aotinfer`` costs
little after ``import torch``; ``aotinfer.softmax`` and friends resolve on first access.
"""

import importlib

from ._version import __version__

# Public name -> submodule that defines it (FlashInfer's top-level re-exports).
_LAZY_NAMES = {
    # flashinfer.sampling
    "chain_speculative_sampling": "sampling",
    "min_p_sampling_from_probs": "sampling",
    "sampling_from_logits": "sampling",
    "sampling_from_probs": "sampling",
    "softmax": "sampling",
    "top_k_mask_logits": "sampling",
    "top_k_renorm_probs": "sampling",
    "top_k_sampling_from_probs": "sampling",
    "top_k_top_p_sampling_from_logits": "sampling",
    "top_k_top_p_sampling_from_probs": "sampling",
    "top_p_renorm_probs": "sampling",
    "top_p_sampling_from_probs": "sampling",
    "top_k": "topk",
    "TopKTieBreak": "topk",
    # attention: decode, paged-KV utilities, merging of attention states
    "BatchDecodeWithPagedKVCacheWrapper": "decode",
    "CUDAGraphBatchDecodeWithPagedKVCacheWrapper": "decode",
    "single_decode_with_kv_cache": "decode",
    "append_paged_kv_cache": "page",
    "get_batch_indices_positions": "page",
    "get_seq_lens": "page",
    "merge_state": "cascade",
    "merge_state_in_place": "cascade",
    "merge_states": "cascade",
}
_SUBMODULES = (
    "cascade", "decode", "logits_processor", "page", "reference", "sampling", "topk", "utils",
)  # fmt: skip

__all__ = ["__version__", *_SUBMODULES, *_LAZY_NAMES]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _LAZY_NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
