"""``aotinfer.top_k``: the k largest entries of each row, without sorting the vocabulary."""

from __future__ import annotations

import numbers
from typing import Tuple

import torch

from . import _sampling_checks as _checks
from . import _sampling_ops as _ops

__all__ = ["top_k"]


def top_k(
    input: torch.Tensor, k: int, sorted: bool = False, deterministic: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of each row, with their column indices.

    Parameters
    ----------
    input : torch.Tensor
        ``(batch_size, d)``, float32, float16 or bfloat16.
    k : int
        ``1 <= k <= d``.
    sorted : bool
        ``False`` (default): each row's entries come in ascending index order (the order
        the kernel finds them in; FlashInfer leaves this order unspecified). ``True``:
        descending value order, equal values by ascending index.
    deterministic : bool
        Accepted for FlashInfer compatibility; the selection is always deterministic.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``values`` ``(batch_size, k)`` in the input dtype and ``indices`` ``(batch_size, k)``
        int64. Ties at the k-th value are taken lowest index first; NaN ranks below -inf,
        so it is selected only when a row has fewer than ``k`` other entries.
    """
    x = _checks.matrix("input", input, float32=False)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"k must be an int in [1, {x.size(1)}], got {k!r}")
    if not 1 <= int(k) <= x.size(1):
        raise ValueError(f"k must be in [1, {x.size(1)}] (the row length), got {int(k)}")
    return _ops.top_k_select(x, int(k), bool(sorted))
