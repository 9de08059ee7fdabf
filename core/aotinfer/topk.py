"""``aotinfer.top_k``: the k largest entries of each row, without sorting the vocabulary."""

from __future__ import annotations

import numbers
from enum import IntEnum
from typing import Tuple

import torch

from . import _sampling_checks as _checks
from . import _sampling_ops as _ops
from . import _views

__all__ = ["TopKTieBreak", "top_k"]


class TopKTieBreak(IntEnum):
    """Which of several equal values at the k-th place ``top_k`` keeps (FlashInfer's enum:
    NONE 0, SMALL 1, LARGE 2; ``str()`` is the lower-case name)."""

    NONE = 0  # FlashInfer: no index rule; here the smaller indices, as SMALL
    SMALL = 1  # prefer smaller indices
    LARGE = 2  # prefer larger indices

    def __str__(self) -> str:
        return self.name.lower()


_TIE_BREAKS = frozenset(int(t) for t in TopKTieBreak)  # (IntEnum members hash as ints)


def top_k(
    input: torch.Tensor,
    k: int,
    sorted: bool = False,
    deterministic: bool = False,
    tie_break: int = TopKTieBreak.NONE,
    dsa_graph_safe: bool = False,
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
    tie_break : int or TopKTieBreak
        Which of equal values at the k-th place are kept: ``NONE`` (0, the default) and
        ``SMALL`` (1) the smaller indices (the kernel's own order), ``LARGE`` (2) the larger
        ones; the kernel then runs on the row reversed (one more copy of the input), and
        with ``sorted=True`` equal values come by descending index.
    dsa_graph_safe : bool
        Accepted for FlashInfer compatibility: every call is capturable in a CUDA graph
        (no host synchronisation, no allocation but the outputs).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``values`` ``(batch_size, k)`` in the input dtype and ``indices`` ``(batch_size, k)``
        int64. Ties at the k-th value are taken lowest index first (highest with
        ``tie_break=LARGE``); NaN ranks below -inf, so it is selected only when a row has
        fewer than ``k`` other entries.
    """
    x = _checks.matrix("input", input, float32=False)
    sorted = _views.flag("sorted", sorted)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"k must be an int in [1, {x.size(1)}], got {k!r}")
    if not 1 <= int(k) <= x.size(1):
        raise ValueError(f"k must be in [1, {x.size(1)}] (the row length), got {int(k)}")
    # An int or the enum (an IntEnum): not a bool, nor a float that hashes like one (1.0),
    # nor an unhashable value (a list, a dict).
    known = (
        isinstance(tie_break, numbers.Integral)
        and not isinstance(tie_break, bool)
        and int(tie_break) in _TIE_BREAKS
    )
    if not known:
        raise ValueError(
            f"tie_break must be TopKTieBreak.NONE, SMALL or LARGE (0, 1, 2), got {tie_break!r}"
        )
    if tie_break != TopKTieBreak.LARGE:
        return _ops.top_k_select(x, int(k), sorted)
    # Larger indices first: select on the reversed row, whose lower indices they are.
    values, reversed_indices = _ops.top_k_select(x.flip(-1), int(k), sorted)
    indices = (x.size(1) - 1) - reversed_indices
    if not sorted:  # back to ascending index order
        values, indices = values.flip(-1), indices.flip(-1)
    return values, indices
