"""Validity checks run on an op chain before fusion: ``CompileError``, the
``ValidityCheck`` callable type, the default rules (R1 one softmax, R3 nothing after
indices) and ``validate_pipeline``."""

from __future__ import annotations

from typing import Callable, List, Optional

from .op import Op
from .operators import SoftmaxOp
from .types import TensorType

__all__ = [
    "CompileError",
    "ValidityCheck",
    "get_default_validity_checks",
    "indices_terminal_rule",
    "single_softmax_rule",
    "validate_pipeline",
]


class CompileError(Exception):
    """An op chain fails a type check or a validity check at compilation.

    :meth:`LogitsPipe.compile` re-raises it as ``ValueError("Compilation failed: ...")``.
    Custom validity checks raise it to reject a chain.
    """


ValidityCheck = Callable[[List[Op]], None]
"""A check on the legalized (unfused) op chain: returns None, or raises CompileError."""


def single_softmax_rule(ops: List[Op]) -> None:
    """R1: at most one :class:`SoftmaxOp` in a chain."""
    if sum(isinstance(op, SoftmaxOp) for op in ops) > 1:
        raise CompileError(
            "Multiple Softmax operators found. Only one Softmax is allowed per pipeline."
        )


def indices_terminal_rule(ops: List[Op]) -> None:
    """R3: no op after one whose output is :attr:`TensorType.INDICES`."""
    for op, following in zip(ops, ops[1:]):
        if op.OUT == TensorType.INDICES:
            raise CompileError(
                "No operator may follow one that outputs Indices. "
                f"Found {type(following).__name__} after {type(op).__name__} "
                "which outputs Indices."
            )


def get_default_validity_checks() -> List[ValidityCheck]:
    """The checks every compiler runs, in order: R1 then R3."""
    return [single_softmax_rule, indices_terminal_rule]


def validate_pipeline(ops: List[Op], custom_checks: Optional[List[ValidityCheck]] = None) -> None:
    """Runs the default checks, then ``custom_checks``, on ``ops``.

    Raises
    ------
    CompileError
        ``"Pipeline cannot be empty"``, or the first failing check's error.
    """
    if not ops:
        raise CompileError("Pipeline cannot be empty")
    for check in [*get_default_validity_checks(), *(custom_checks or [])]:
        check(ops)
