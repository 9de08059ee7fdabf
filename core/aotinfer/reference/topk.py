"""Reference top-k selection (``aotinfer.top_k``), by a full stable sort."""

from __future__ import annotations

from typing import Tuple

import torch


def descending_order(x: torch.Tensor) -> torch.Tensor:
    """Column order of each row of ``x``: larger values first, equal values lowest index
    first, NaN after everything (even -inf). int64, same shape as ``x``."""
    nan = torch.isnan(x)
    key = torch.where(nan, float("-inf"), x.to(torch.float32))
    by_value = key.sort(dim=-1, descending=True, stable=True).indices
    # A second stable pass moves NaN to the end without disturbing the rest.
    nan_last = nan.gather(-1, by_value).to(torch.int8).sort(dim=-1, stable=True).indices
    return by_value.gather(-1, nan_last)


def top_k(input: torch.Tensor, k: int, sorted: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of each row of ``input`` ``(B, V)``.

    Ties at the k-th value are taken lowest index first; NaN ranks below -inf. Returns
    ``(values, indices)`` of shape ``(B, k)``, values in the input dtype and indices int64,
    in ascending index order, or in descending value order (ties by index) when
    ``sorted``. On the input's device.
    """
    x = input.detach()
    chosen = descending_order(x)[:, :k]
    if not sorted:
        chosen = chosen.sort(dim=-1).values
    return x.gather(1, chosen), chosen
