"""Base classes of the low-level ops a pipeline runs: ``Op`` (typed, callable on a
``TaggedTensor``) and ``ParameterizedOp`` (adds compile-time defaults for runtime
parameters)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, Optional

from .types import TaggedTensor, TensorType

__all__ = ["Op", "ParameterizedOp"]


class Op(ABC):
    """A typed step of a compiled pipeline: takes a tensor of type ``IN``, returns ``OUT``.

    Subclasses set the class attributes ``IN`` and ``OUT`` and implement ``__call__``.
    Processors (:class:`LogitsProcessor`) legalize into ops; the compiler type-checks op
    chains and fuses windows of ops into single ops.

    Attributes
    ----------
    IN : TensorType
        The type of tensor the op accepts.
    OUT : TensorType
        The type of tensor the op returns.

    Raises
    ------
    ValueError
        At construction, when the subclass left ``IN`` or ``OUT`` unset.

    Examples
    --------
    >>> class Negate(Op):
    ...     IN = TensorType.LOGITS
    ...     OUT = TensorType.LOGITS
    ...     def __call__(self, tensor, **kwargs):
    ...         return TaggedTensor(-tensor.data, self._validate_input_type(tensor))
    >>> Negate()
    Negate(LOGITS -> LOGITS)
    """

    IN: Optional[TensorType] = None
    OUT: Optional[TensorType] = None

    def __init__(self) -> None:
        if self.IN is None or self.OUT is None:
            raise ValueError(f"Operator {type(self).__name__} must define IN and OUT tensor types")

    @abstractmethod
    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        """Runs the op on ``tensor``; ``kwargs`` are the pipe's runtime keyword arguments."""

    def _validate_input_type(self, tensor: TaggedTensor) -> TensorType:
        """Returns ``OUT`` if ``tensor`` has type ``IN``; raises ValueError otherwise."""
        if tensor.type != self.IN:
            raise ValueError(
                f"Operator {type(self).__name__} cannot accept input type {tensor.type}. "
                f"Expected: {self.IN}"
            )
        return self.OUT

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.IN} -> {self.OUT})"


class ParameterizedOp(Op):
    """An :class:`Op` with parameters: defaults fixed at construction, overridable per call.

    Parameters
    ----------
    **default_params : Any
        Compile-time values, stored as ``self.default_params``. A runtime keyword argument
        of the same name takes precedence.

    Examples
    --------
    >>> class Scale(ParameterizedOp):
    ...     IN = TensorType.LOGITS
    ...     OUT = TensorType.LOGITS
    ...     def __call__(self, tensor, **kwargs):
    ...         out = self._validate_input_type(tensor)
    ...         return TaggedTensor(tensor.data * self._get_param("factor", kwargs), out)
    >>> Scale(factor=2.0).default_params
    {'factor': 2.0}
    """

    def __init__(self, **default_params: Any) -> None:
        super().__init__()
        self.default_params: Dict[str, Any] = default_params

    def _get_param(self, name: str, kwargs: Dict[str, Any], required: bool = True) -> Any:
        """The value of parameter ``name``.

        Order: the runtime keyword argument (removed from ``kwargs``), then the
        compile-time default, then ``None`` when ``required`` is false. A missing required
        parameter raises ``ValueError("Required parameter '<name>' not provided for <Op>")``.
        """
        if name in kwargs:
            return kwargs.pop(name)
        if name in self.default_params:
            return self.default_params[name]
        if required:
            raise ValueError(f"Required parameter '{name}' not provided for {type(self).__name__}")
        return None
