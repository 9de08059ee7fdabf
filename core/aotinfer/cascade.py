"""Merging attention states with FlashInfer's API (``flashinfer.cascade``).

A state is a partial attention output ``v`` with the base-2 log-sum-exp ``s`` of the
logits it covered. Merging weighs each by ``2 ** s``: with ``m = max s_i``,
``v = sum 2**(s_i - m) v_i / sum 2**(s_i - m)`` and ``s = m + log2(sum 2**(s_i - m))``.
States with ``s = -inf`` (no key seen) carry no weight and their ``v`` is never read (NaN
there does not leak in); if every state of a row has ``s = -inf`` the result is ``v = 0``,
``s = -inf``. A NaN or ``+inf`` LSE in any state leaves no finite weights: that row and head
merges to ``v = NaN``, ``s = NaN`` (FlashInfer's kernels give NaN there too; they also give
NaN for an empty state whose ``v`` is NaN, which aotinfer skips). CPU and GPU follow the same
rules (``reference/cascade.py``).

CUDA tensors run the provider's merge kernels; CPU tensors run the reference.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _attention_ops as _ops
from . import _attention_utils as _u
from . import _custom_ops, _views
from . import _decode_launch as _launch
from .reference import cascade as _ref

__all__ = ["merge_state", "merge_state_in_place", "merge_states"]

V_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _kernels(device: torch.device):
    return _launch.provider_kernels(device)


# The merge kernels launch one block per (position, head): grid.x positions, grid.y heads.
_MAX_POSITIONS, _MAX_HEADS = _u.MAX_GRID_X, _u.MAX_HEADS


def _check_v(name: str, v, ndim: int) -> torch.Tensor:
    _views.check_tensor(name, v, ndim=ndim, dtypes=V_DTYPES)
    _views.check_device_supported(name, v)
    positions, heads = v.size(0), v.size(ndim - 2)
    if positions > _MAX_POSITIONS or heads > _MAX_HEADS:
        raise ValueError(
            f"{name} has {positions} positions and {heads} heads; the merge kernels take at "
            f"most {_MAX_POSITIONS} and {_MAX_HEADS} (one block per position and head)"
        )
    return v


def _check_s(name: str, s, shape, device) -> torch.Tensor:
    _views.check_tensor(name, s, device=device)
    if tuple(s.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(s.shape)}")
    if not s.is_floating_point():
        raise ValueError(f"{name} must be a float tensor, got {s.dtype}")
    return s


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def merge_state(
    v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge two attention states.

    Parameters
    ----------
    v_a, v_b : torch.Tensor
        ``(seq_len, num_heads, head_dim)`` float16, bfloat16 or float32, same dtype.
    s_a, s_b : torch.Tensor
        ``(seq_len, num_heads)`` base-2 LSE (cast to float32 if not).

    Returns
    -------
    v_merged : torch.Tensor
        ``(seq_len, num_heads, head_dim)`` in v's dtype.
    s_merged : torch.Tensor
        ``(seq_len, num_heads)`` float32.

    Examples
    --------
    >>> v, s = aotinfer.merge_state(v_prefix, s_prefix, v_suffix, s_suffix)
    """
    if _custom_ops.tracing():
        return _ops.merge_state(v_a, s_a, v_b, s_b)
    _check_v("v_a", v_a, 3)
    _views.check_tensor("v_b", v_b, dtypes=(v_a.dtype,), device=v_a.device)
    if v_b.shape != v_a.shape:
        raise ValueError(f"v_b must have v_a's shape {tuple(v_a.shape)}, got {tuple(v_b.shape)}")
    _check_s("s_a", s_a, v_a.shape[:2], v_a.device)
    _check_s("s_b", s_b, v_a.shape[:2], v_a.device)
    if _launch.use_reference(v_a.device):
        v, s = _launch.reference(_ref.merge_state, v_a, s_a, v_b, s_b)
        return v.to(v_a.dtype), s.to(torch.float32)
    # Two launches: copy state a, then merge b into it in place. Detached: a clone of an
    # input that requires grad would report CloneBackward, a gradient the kernel's write
    # makes wrong (no output of the family carries one).
    v_merged = v_a.detach().clone(memory_format=torch.contiguous_format)
    s_merged = s_a.detach().to(torch.float32).clone(memory_format=torch.contiguous_format)
    _in_place_cuda(v_merged, s_merged, _dense(v_b), _dense(s_b.to(torch.float32)), None)
    return v_merged, s_merged


def merge_state_in_place(
    v: torch.Tensor,
    s: torch.Tensor,
    v_other: torch.Tensor,
    s_other: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
) -> None:
    """Merge ``(v_other, s_other)`` into ``(v, s)``, in place.

    Parameters
    ----------
    v : torch.Tensor
        ``(seq_len, num_heads, head_dim)`` float16, bfloat16 or float32, contiguous; updated.
    s : torch.Tensor
        ``(seq_len, num_heads)`` float32, contiguous; updated.
    v_other : torch.Tensor
        Like ``v``.
    s_other : torch.Tensor
        Like ``s`` (cast to float32 if not).
    mask : torch.Tensor, optional
        ``(seq_len,)`` bool on v's device; rows where it is False are left untouched (lets
        a CUDA graph merge a varying subset of rows).
    """
    if _custom_ops.tracing():
        _ops.merge_state_in_place(v, s, v_other, s_other, mask)
        return
    _check_v("v", v, 3)
    _views.check_tensor("v_other", v_other, dtypes=(v.dtype,), device=v.device)
    if v_other.shape != v.shape:
        raise ValueError(
            f"v_other must have v's shape {tuple(v.shape)}, got {tuple(v_other.shape)}"
        )
    _check_s("s", s, v.shape[:2], v.device)
    _check_s("s_other", s_other, v.shape[:2], v.device)
    if s.dtype != torch.float32:
        raise ValueError(f"s must be float32 (it is updated in place), got {s.dtype}")
    for name, t in (("v", v), ("s", s)):
        if not t.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (it is updated in place), got strides "
                f"{tuple(t.stride())}"
            )
    if mask is not None:
        _views.check_tensor("mask", mask, ndim=1, dtypes=(torch.bool,), device=v.device)
        if mask.numel() != v.size(0):
            raise ValueError(f"mask must have seq_len = {v.size(0)} entries, got {mask.numel()}")
    if _launch.use_reference(v.device):
        _launch.reference(_ref.merge_state_in_place, v, s, v_other, s_other, mask)
        return
    mask = None if mask is None else _dense(mask)
    _in_place_cuda(v, s, _dense(v_other), _dense(s_other.to(torch.float32)), mask)


def _in_place_cuda(v, s, v_other, s_other, mask) -> None:
    _kernels(v.device).merge_state_in_place(
        _views.view(v),
        _views.view(s),
        _views.view(v_other),
        _views.view(s_other),
        _views.view(mask),
        _views.stream_handle(v.device),
    )


def merge_states(v: torch.Tensor, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge ``num_states`` attention states per row and head.

    Parameters
    ----------
    v : torch.Tensor
        ``(seq_len, num_states, num_heads, head_dim)`` float16, bfloat16 or float32.
    s : torch.Tensor
        ``(seq_len, num_states, num_heads)`` base-2 LSE (cast to float32 if not).

    Returns
    -------
    v_merged : torch.Tensor
        ``(seq_len, num_heads, head_dim)`` in v's dtype.
    s_merged : torch.Tensor
        ``(seq_len, num_heads)`` float32.
    """
    if _custom_ops.tracing():
        return _ops.merge_states(v, s)
    _check_v("v", v, 4)
    _check_s("s", s, v.shape[:3], v.device)
    if v.size(1) == 0:
        raise ValueError(
            f"v must hold num_states >= 1 states to merge, got shape {tuple(v.shape)} "
            "(seq_len, num_states, num_heads, head_dim)"
        )
    n, _, h, d = v.shape
    if _launch.use_reference(v.device):
        vm, sm = _launch.reference(_ref.merge_states, v, s)
        return vm.to(v.dtype), sm.to(torch.float32)
    v_out = torch.empty((n, h, d), dtype=v.dtype, device=v.device)
    s_out = torch.empty((n, h), dtype=torch.float32, device=v.device)
    _kernels(v.device).merge_states(
        _views.view(_dense(v)),
        _views.view(_dense(s.to(torch.float32))),
        _views.view(v_out),
        _views.view(s_out),
        _views.stream_handle(v.device),
    )
    return v_out, s_out
