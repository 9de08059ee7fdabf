"""Reference merge of attention states (partial outputs with their base-2 LSE).

Merging states (v_i, s_i): ``m = max_i s_i``, ``w_i = 2 ** (s_i - m)``,
``v = sum_i w_i v_i / sum_i w_i``, ``s = m + log2(sum_i w_i)``.

States that are not ordinary (the kernels follow the same rules):

- ``s = -inf`` (the state saw no key) weighs nothing and its ``v`` is never read, so NaN or
  garbage there does not reach the result (a split that saw no key need not write it). A
  row whose states all have ``s = -inf`` merges to ``v = 0``, ``s = -inf``.
- ``s`` NaN or ``+inf`` in any state of a row leaves no finite weights: that row merges to
  ``v = NaN``, ``s = NaN``, never to a result that looks valid.
- A state of finite ``s`` whose ``v`` holds NaN makes the merged ``v`` NaN, however small
  its weight.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch


def merge_states(
    v: torch.Tensor, s: torch.Tensor, compute_dtype: torch.dtype = torch.float32
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge S states per row and head.

    Parameters
    ----------
    v : torch.Tensor
        ``(N, S, H, D)``.
    s : torch.Tensor
        ``(N, S, H)`` base-2 LSE.

    Returns
    -------
    v_merged : torch.Tensor
        ``(N, H, D)`` in ``compute_dtype``.
    s_merged : torch.Tensor
        ``(N, H)`` in ``compute_dtype``.
    """
    vf, sf = v.to(compute_dtype), s.to(compute_dtype)
    m = sf.amax(dim=1, keepdim=True)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp2(sf - m_safe)  # 0 for -inf states
    total = w.sum(dim=1)  # (N, H)
    empty = (sf == -math.inf).unsqueeze(-1)  # their v is not read: 0 * NaN would be NaN
    merged = torch.where(empty, torch.zeros_like(vf), w.unsqueeze(-1) * vf).sum(dim=1)
    safe_total = torch.where(total > 0, total, torch.ones_like(total))
    merged = merged / safe_total.unsqueeze(-1)
    lse = m_safe.squeeze(1) + torch.log2(total)
    undefined = (torch.isnan(sf) | (sf == math.inf)).any(dim=1)  # (N, H)
    merged = torch.where(undefined.unsqueeze(-1), math.nan, merged)
    return merged, torch.where(undefined, math.nan, lse)


def merge_state(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    compute_dtype: torch.dtype = torch.float32,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge two states: ``v (N, H, D)``, ``s (N, H)`` each; results in ``compute_dtype``."""
    return merge_states(
        torch.stack([v_a.to(compute_dtype), v_b.to(compute_dtype)], dim=1),
        torch.stack([s_a.to(compute_dtype), s_b.to(compute_dtype)], dim=1),
        compute_dtype,
    )


def merge_state_in_place(
    v: torch.Tensor,
    s: torch.Tensor,
    v_other: torch.Tensor,
    s_other: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
) -> None:
    """Merge ``(v_other, s_other)`` into ``(v, s)`` in place; rows with ``mask`` False are
    left untouched. ``v`` keeps its dtype (rounded once from float32)."""
    merged_v, merged_s = merge_state(v, s, v_other, s_other)
    if mask is not None:
        keep = ~mask.to(torch.bool)
        merged_v = torch.where(keep.view(-1, 1, 1), v.to(merged_v.dtype), merged_v)
        merged_s = torch.where(keep.view(-1, 1), s.to(merged_s.dtype), merged_s)
    v.copy_(merged_v)
    s.copy_(merged_s)
