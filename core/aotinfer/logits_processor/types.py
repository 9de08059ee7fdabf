"""Semantic tensor types of the logits pipeline: the ``TensorType`` enum and the
``TaggedTensor`` wrapper that carries a tensor together with its type between ops."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Dict, Optional, Tuple, Union

import torch

__all__ = ["TaggedTensor", "TensorType"]


class TensorType(Enum):
    """What the values of a tensor in the pipeline mean.

    Attributes
    ----------
    LOGITS
        Real-valued scores, possibly masked with ``-inf``; one row per request.
    PROBS
        Non-negative probabilities, one row per request; a row need not sum to one.
    INDICES
        Integer token ids, the terminal type: nothing may follow an op producing it.

    Notes
    -----
    ``str(TensorType.LOGITS)`` is ``"LOGITS"`` (used in error messages and op reprs);
    ``repr(TensorType.LOGITS)`` is ``"TensorType.LOGITS"``.
    """

    LOGITS = auto()
    PROBS = auto()
    INDICES = auto()

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"TensorType.{self.name}"


def _unwrap(value: Any) -> Any:
    """``value`` with every TaggedTensor inside (lists, tuples, dicts) replaced by its data."""
    if isinstance(value, TaggedTensor):
        return value.data
    if isinstance(value, (list, tuple)):
        items = [_unwrap(v) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, eq=False, repr=False)
class TaggedTensor:
    """A tensor and its semantic :class:`TensorType`, as passed from op to op.

    The pipeline tags its input, every op checks the tag of what it receives and tags what
    it returns, and :class:`LogitsPipe` hands back the plain tensor at the end. Users rarely
    build one; passing a ``TaggedTensor`` to a pipe overrides the pipe's initial type.

    Parameters
    ----------
    data : torch.Tensor
        The wrapped tensor.
    type : TensorType
        What ``data`` holds.

    Notes
    -----
    Instances are immutable. Any ``torch`` function called with a ``TaggedTensor`` argument
    (``torch.softmax(t, -1)``, ``torch.cat([t, t])``) runs on the wrapped data and returns
    a plain ``torch.Tensor``. Equality is identity: comparing two wrapped tensors
    element-wise is the job of ``torch.equal`` on ``.data``.

    Examples
    --------
    >>> t = TaggedTensor.logits(torch.zeros(2, 8))
    >>> t
    TaggedTensor(type=LOGITS, shape=torch.Size([2, 8]), dtype=torch.float32, device=cpu)
    >>> torch.softmax(t, -1).shape
    torch.Size([2, 8])
    """

    __slots__ = ("data", "type")

    data: torch.Tensor
    type: TensorType

    @staticmethod
    def logits(t: torch.Tensor) -> TaggedTensor:
        """``t`` tagged as :attr:`TensorType.LOGITS`."""
        return TaggedTensor(t, TensorType.LOGITS)

    @staticmethod
    def probs(t: torch.Tensor) -> TaggedTensor:
        """``t`` tagged as :attr:`TensorType.PROBS`."""
        return TaggedTensor(t, TensorType.PROBS)

    @staticmethod
    def indices(t: torch.Tensor) -> TaggedTensor:
        """``t`` tagged as :attr:`TensorType.INDICES`."""
        return TaggedTensor(t, TensorType.INDICES)

    @classmethod
    def __torch_function__(
        cls,
        func: Any,
        types: Tuple[type, ...],
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        return func(*_unwrap(tuple(args)), **_unwrap(dict(kwargs or {})))

    @property
    def shape(self) -> torch.Size:
        """Shape of the wrapped tensor."""
        return self.data.shape

    @property
    def device(self) -> torch.device:
        """Device of the wrapped tensor."""
        return self.data.device

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the wrapped tensor."""
        return self.data.dtype

    def size(self, dim: Optional[int] = None) -> Union[torch.Size, int]:
        """``data.size()`` (all dimensions) or ``data.size(dim)``."""
        return self.data.size() if dim is None else self.data.size(dim)

    def __repr__(self) -> str:
        return (
            f"TaggedTensor(type={self.type}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device})"
        )
