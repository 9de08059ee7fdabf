"""The attention functions as torch custom ops, for ``torch.compile`` and tracing.

Each op's implementation is the public function itself, run eagerly on real tensors (its
checks included, so a bad argument raises when the compiled graph runs); the fake
implementations only allocate. The public functions call these ops only where
``_custom_ops.tracing()`` says so; eager calls never pass through the dispatcher (the
decode host-time goal). Outputs a caller may pass (``out``, ``lse``) and the buffers the
functions update (the paged cache, ``merge_state_in_place``'s state) are mutated
arguments of the ops, allocated by the traced Python code where the caller gave none.

``BatchDecodeWithPagedKVCacheWrapper.run`` reaches its wrapper through a key (the
wrapper's registry entry, fixed for its life), not through its plan, so that re-planning
between calls, as a serving loop does every step, does not recompile the graph.
"""

from __future__ import annotations

import weakref

import torch

from . import _custom_ops

# key -> wrapper; an entry goes with its wrapper.
_WRAPPERS: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()


def register_wrapper(wrapper) -> int:
    """The key a wrapper's traced run() passes to the op."""
    key = id(wrapper)
    _WRAPPERS[key] = wrapper
    return key


def cache_args(paged_kv_cache) -> tuple:
    """A paged cache as the ops take it: ``(cache, None)`` for one 5-D tensor, ``(k, v)``
    for a tuple of halves (a schema has no tensor-or-tuple type)."""
    if isinstance(paged_kv_cache, torch.Tensor):
        return paged_kv_cache, None
    return tuple(paged_kv_cache)


def _cache(k: torch.Tensor, v):
    """cache_args undone."""
    return k if v is None else (k, v)


# ------------------------------------------------------------------------ merges (cascade)


def _merge_state_impl(v_a, s_a, v_b, s_b):
    from . import cascade

    return cascade.merge_state(v_a, s_a, v_b, s_b)


def _merge_state_fake(v_a, s_a, v_b, s_b):
    return torch.empty_like(v_a, memory_format=torch.contiguous_format), s_a.new_empty(
        v_a.shape[:2], dtype=torch.float32
    )


merge_state = _custom_ops.define(
    "merge_state",
    "(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b) -> (Tensor, Tensor)",
    _merge_state_impl,
    _merge_state_fake,
)


def _merge_state_in_place_impl(v, s, v_other, s_other, mask):
    from . import cascade

    cascade.merge_state_in_place(v, s, v_other, s_other, mask)


merge_state_in_place = _custom_ops.define(
    "merge_state_in_place",
    "(Tensor(a!) v, Tensor(b!) s, Tensor v_other, Tensor s_other, Tensor? mask) -> ()",
    _merge_state_in_place_impl,
    lambda *args: None,
)


def _merge_states_impl(v, s):
    from . import cascade

    return cascade.merge_states(v, s)


def _merge_states_fake(v, s):
    n, _, h, d = v.shape
    return v.new_empty((n, h, d)), s.new_empty((n, h), dtype=torch.float32)


merge_states = _custom_ops.define(
    "merge_states",
    "(Tensor v, Tensor s) -> (Tensor, Tensor)",
    _merge_states_impl,
    _merge_states_fake,
)


# ------------------------------------------------------------------------------ page


def _append_impl(
    key, value, batch_indices, positions, cache, v_cache, indices, indptr, last, layout
):
    from . import page

    page.append_paged_kv_cache(
        key, value, batch_indices, positions, _cache(cache, v_cache), indices, indptr, last, layout
    )


append_paged_kv_cache = _custom_ops.define(
    "append_paged_kv_cache",
    "(Tensor append_key, Tensor append_value, Tensor batch_indices, Tensor positions, "
    "Tensor(a!) paged_kv_cache, Tensor(b!)? v_cache, Tensor kv_indices, Tensor kv_indptr, "
    "Tensor kv_last_page_len, str kv_layout) -> ()",
    _append_impl,
    lambda *args: None,
)


# ---------------------------------------------------------------------------- decode


def _single_decode_impl(q, k, v, *options):
    from . import decode

    return decode.single_decode_with_kv_cache(q, k, v, *options, return_lse=True)


def _single_decode_fake(q, k, v, *options):
    return q.new_empty(q.shape), q.new_empty(q.shape[:1], dtype=torch.float32)


# The options follow q, k, v in single_decode_with_kv_cache's order; return_lse apart: the
# op always returns the LSE, and the traced call drops it where it was not asked for.
single_decode = _custom_ops.define(
    "single_decode",
    "(Tensor q, Tensor k, Tensor v, str kv_layout, str pos_encoding_mode, bool use_tensor_cores, "
    "float? q_scale, float? k_scale, float? v_scale, int window_left, float? logits_soft_cap, "
    "float? sm_scale, float? rope_scale, float? rope_theta) -> (Tensor, Tensor)",
    _single_decode_impl,
    _single_decode_fake,
)


def _wrapper(key: int):
    """The wrapper a traced run() or forward() passed by its key."""
    wrapper = _WRAPPERS.get(key)
    if wrapper is None:
        raise RuntimeError(
            "the BatchDecodeWithPagedKVCacheWrapper this compiled call was traced with no "
            "longer exists"
        )
    return wrapper


def _batch_decode_impl(
    q, cache, v_cache, out, lse, key, q_scale, k_scale, v_scale, window_left, sinks, q_len_per_req
):
    _wrapper(key).run(
        q,
        _cache(cache, v_cache),
        q_scale=q_scale,
        k_scale=k_scale,
        v_scale=v_scale,
        out=out,
        lse=lse,
        window_left=window_left,
        sinks=sinks,
        q_len_per_req=q_len_per_req,
    )


batch_decode = _custom_ops.define(
    "batch_decode",
    "(Tensor q, Tensor paged_kv_cache, Tensor? v_cache, Tensor(a!) out, Tensor(b!)? lse, "
    "int wrapper, float? q_scale, float? k_scale, float? v_scale, int? window_left, "
    "Tensor? sinks, int? q_len_per_req) -> ()",
    _batch_decode_impl,
    lambda *args: None,
)


def _batch_decode_forward_impl(
    q, cache, v_cache, out, lse, key, pos_encoding_mode, q_scale, k_scale, v_scale,
    window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta,
):  # fmt: skip
    _wrapper(key)._forward_into(
        q, _cache(cache, v_cache), out, lse, pos_encoding_mode, q_scale, k_scale, v_scale,
        window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta,
    )  # fmt: skip


# The deprecated forward(): run()'s op with the per-call options of forward() in place of
# run()'s (the options follow the key in forward()'s order).
batch_decode_forward = _custom_ops.define(
    "batch_decode_forward",
    "(Tensor q, Tensor paged_kv_cache, Tensor? v_cache, Tensor(a!) out, Tensor(b!)? lse, "
    "int wrapper, str pos_encoding_mode, float? q_scale, float? k_scale, float? v_scale, "
    "int window_left, float? logits_soft_cap, float? sm_scale, float? rope_scale, "
    "float? rope_theta) -> ()",
    _batch_decode_forward_impl,
    lambda *args: None,
)
