"""The call into the provider's ``batch_decode`` (providers/csrc/attention/decode_launchers.h)
and the routing of decode work between the provider (CUDA tensors) and the reference (CPU
tensors). Nothing here validates: callers have checked every argument.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple, Optional, Tuple

import torch

from . import _views
from ._decode_plan import SplitPlan
from ._providers import kernels_for
from .reference import attention as _ref

POS_NAMES = ("NONE", "ROPE_LLAMA", "ALIBI")
LAYOUT_NAMES = ("NHD", "HND")


class DecodeScalars(NamedTuple):
    """The run-time scalars of one decode call, as the kernel takes them.

    ``sm_scale`` already includes ``q_scale``; ``k_scale`` multiplies the logits and
    ``v_scale`` the output inside the kernel. A named tuple, not a frozen dataclass: a run()
    with fp8 scales builds one per call, and a frozen dataclass took 3-4x as long to build
    (1.5-2.1 against 0.4-0.7 us on the CI machine's CPU, dev/time_decode_checks.py).
    """

    sm_scale: float
    logits_soft_cap: float
    window_left: int
    pos_code: int
    rope_scale: float
    rope_theta: float
    k_scale: float
    v_scale: float


def use_reference(device: torch.device) -> bool:
    """CPU tensors run the reference; CUDA tensors the provider (never a fallback). Tests
    replace this to drive the provider path with a simulated provider on CPU."""
    return device.type == "cpu"


def reference(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` of the reference for the CPU path, outside autograd as the
    kernels run (README): no output carries a gradient, and an in-place output that
    requires grad is written, not refused with torch's unnamed leaf error."""
    with torch.no_grad():
        return fn(*args, **kwargs)


# Whether the current CUDA stream is capturing a graph (the CPU tests replace this to drive
# both sides of run()'s eager/captured merge choice).
capturing = _views.stream_capturing


# The chosen provider's kernel module for a CUDA device (imports it on first use); a name of
# this module so that the CPU tests can replace it with a simulated provider.
provider_kernels = kernels_for


@functools.cache
def _device_properties(index: int):
    return torch.cuda.get_device_properties(index)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def num_sms(device: torch.device) -> int:
    """Multiprocessors of a CUDA device, read once per device."""
    return _device_properties(_index(device)).multi_processor_count


def cc_major(device: torch.device) -> int:
    """Compute capability major of a CUDA device, read once per device."""
    return _device_properties(_index(device)).major


def _switch_on(name: str) -> bool:
    """An on|off switch of the README's table (unset or empty: on); another value is a
    ValueError that names it."""
    value = os.environ.get(name, "")
    if value not in ("", "on", "off"):
        raise ValueError(f"{name} must be on or off, got {value!r}")
    return value != "off"


ENV_CLUSTER_MERGE = "AOTINFER_DECODE_CLUSTER_MERGE"


def cluster_merge_on() -> bool:
    """``AOTINFER_DECODE_CLUSTER_MERGE=on|off`` (README switch table; default on), which the
    provider reads too: whether split requests may merge in thread-block clusters on sm_90+
    (cluster_merge.cuh). Off pins the merge kernel / in-grid merge for tests and A/B runs."""
    return _switch_on(ENV_CLUSTER_MERGE)


def clusters_merge(device: torch.device) -> bool:
    """Whether the provider merges a split request's pieces in thread-block clusters on
    ``device`` (sm_90+, unless :func:`cluster_merge_on` says off). Not for a CPU device:
    the CPU tests' simulated provider keeps the plain plans."""
    if device.type != "cuda":
        return False
    return cc_major(device) >= 9 and cluster_merge_on()


ENV_PREPARED = "AOTINFER_DECODE_PREPARED"


def prepared_launches_on() -> bool:
    """``AOTINFER_DECODE_PREPARED=on|off`` (README switch table; default on), read by each
    plan(): whether the wrapper's run() launches through the provider's prepared call
    (``kernels.prepare_batch_decode``, checked once per plan) or passes every view to
    ``kernels.batch_decode`` on each call. Off is for A/B runs of host time in one process."""
    return _switch_on(ENV_PREPARED)


def half_strides(strides: tuple) -> tuple:
    """The strides of ``cache[:, 0]`` (and ``cache[:, 1]``) of a 5-D paged cache."""
    return (strides[0], strides[2], strides[3], strides[4])


def cache_half_views(
    ptr: int, shape: tuple, strides: tuple, code: int, itemsize: int, device: int
) -> Tuple[tuple, tuple]:
    """Provider views of ``cache[:, 0]`` and ``cache[:, 1]`` of a 5-D paged cache from its
    pointer, shape, strides, dtype code, element size and device index (slicing the tensor
    costs microseconds per call; run() has all of these from its checks)."""
    half, strides_of_half = (shape[0], shape[2], shape[3], shape[4]), half_strides(strides)
    v_ptr = ptr + strides[1] * itemsize
    return (ptr, code, half, strides_of_half, device), (v_ptr, code, half, strides_of_half, device)


# kernels.batch_decode's arguments, in the header's order, come in groups: q, k_cache,
# v_cache; the table group; out, lse; the split group; the scalar group; sinks, stream. A
# wrapper's plan() builds the table and split groups (and the scalar group of its planned
# options) once, so run() passes them as ready tuples.


def table_args(layout_code: int, page_size: int, table_views: tuple, kv_len_scalar: int) -> tuple:
    """kv_layout, page_size, indptr, indices, last_page_len, kv_len_scalar."""
    return (layout_code, page_size, *table_views, kv_len_scalar)


def split_args(
    partial_views: tuple, work_views: tuple, split: SplitPlan, q_len_per_req: int
) -> tuple:
    """partial_out, partial_lse, work, split_counts, arrivals, chunk_pages, max_splits,
    q_len_per_req."""
    return (*partial_views, *work_views, split.chunk_pages, split.max_splits, q_len_per_req)


def scalar_args(s: DecodeScalars, alibi_view) -> tuple:
    """sm_scale through v_scale (the ALiBi slopes only where the mode uses them)."""
    return (
        s.sm_scale,
        s.logits_soft_cap,
        s.window_left,
        s.pos_code,
        s.rope_scale,
        s.rope_theta,
        alibi_view if s.pos_code == 2 else None,
        s.k_scale,
        s.v_scale,
    )


def call_batch_decode(
    kernels,
    q_view,
    k_view,
    v_view,
    layout_code: int,
    page_size: int,
    table_views: tuple,
    kv_len_scalar: int,
    out_view,
    lse_view,
    partial_views: tuple,
    work_views: tuple,
    split: SplitPlan,
    q_len_per_req: int,
    s: DecodeScalars,
    alibi_view,
    sinks_view,
    stream: int,
) -> None:
    """``kernels.batch_decode`` on views, argument for argument as the header documents."""
    kernels.batch_decode(
        q_view,
        k_view,
        v_view,
        *table_args(layout_code, page_size, table_views, kv_len_scalar),
        out_view,
        lse_view,
        *split_args(partial_views, work_views, split, q_len_per_req),
        *scalar_args(s, alibi_view),
        sinks_view,
        stream,
    )


def reference_params(
    scalars: DecodeScalars, alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor]
) -> dict:
    """Keyword arguments of the reference ``attention`` for these scalars."""
    return dict(
        sm_scale=scalars.sm_scale,
        k_scale=scalars.k_scale,
        v_scale=scalars.v_scale,
        logits_soft_cap=scalars.logits_soft_cap,
        window_left=scalars.window_left,
        pos_encoding_mode=POS_NAMES[scalars.pos_code],
        rope_scale=scalars.rope_scale,
        rope_theta=scalars.rope_theta,
        alibi_slopes=alibi_slopes if scalars.pos_code == 2 else None,
        sinks=sinks,
    )


def run_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    last_page_len: torch.Tensor,
    *,
    kv_layout: str,
    q_len_per_req: int,
    scalars: DecodeScalars,
    alibi_slopes: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor],
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
) -> None:
    """The CPU path: the reference, written into ``out`` (and ``lse``) outside autograd
    (:func:`reference`)."""
    o, s = reference(
        _ref.batch_decode,
        q,
        k_cache,
        v_cache,
        indptr,
        indices,
        last_page_len,
        kv_layout=kv_layout,
        q_len_per_req=q_len_per_req,
        **reference_params(scalars, alibi_slopes, sinks),
    )
    reference(out.copy_, o)
    if lse is not None:
        reference(lse.copy_, s)
