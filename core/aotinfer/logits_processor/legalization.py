"""Stages one and two of building a pipe: inferring the input type from the first
processor, and legalizing processors into typed ops (``legalize_processors``)."""

from __future__ import annotations

from typing import List

from .op import Op
from .processors import LogitsProcessor
from .types import TensorType

__all__ = [
    "LegalizationError",
    "infer_initial_type",
    "legalize_processors",
    "validate_processor_chain",
]

_PIPELINE_INPUTS = (TensorType.LOGITS, TensorType.PROBS)


class LegalizationError(Exception):
    """A processor chain cannot be turned into ops: empty, a processor refusing the type
    it would receive, or an input type that cannot be inferred.

    :class:`LogitsPipe` re-raises it as ``ValueError("Pipeline creation failed: ...")``.
    """


def legalize_processors(
    processors: List[LogitsProcessor], initial_type: TensorType = TensorType.LOGITS
) -> List[Op]:
    """Legalizes each processor for the type the previous one produces.

    Parameters
    ----------
    processors : list of LogitsProcessor
        The chain, in order.
    initial_type : TensorType, optional
        The type of the pipe's input. Default LOGITS.

    Returns
    -------
    list of Op
        The concatenated ops; the type passed on is the last op's ``OUT``.

    Raises
    ------
    LegalizationError
        ``"Cannot legalize empty processor list"``, or
        ``"Failed to legalize processor {i} ({Name}): {reason}"`` for whatever went wrong
        with processor ``i`` (including ``"Processor {Name} produced no ops"``).
    """
    if not processors:
        raise LegalizationError("Cannot legalize empty processor list")
    ops: List[Op] = []
    current = initial_type
    for i, processor in enumerate(processors):
        name = type(processor).__name__
        try:
            produced = processor.legalize(current)
            if not produced:
                raise LegalizationError(f"Processor {name} produced no ops")
            ops.extend(produced)
            current = produced[-1].OUT
        except Exception as e:
            raise LegalizationError(f"Failed to legalize processor {i} ({name}): {e}") from e
    return ops


def _accepted_inputs(processor: LogitsProcessor) -> List[TensorType]:
    """The pipeline input types (LOGITS, PROBS) ``processor`` takes: those it legalizes
    for without error into ops whose first op accepts that type. (The second condition
    lets a custom processor that returns the same ops whatever it is asked, as in the
    documented ``CustomLogitsProcessor`` example, be inferred from its op's ``IN``.)"""
    accepted = []
    for candidate in _PIPELINE_INPUTS:
        try:
            ops = processor.legalize(candidate)
        except (ValueError, LegalizationError):
            continue
        if ops and getattr(ops[0], "IN", candidate) != candidate:
            continue
        accepted.append(candidate)
    return accepted


def infer_initial_type(processors: List[LogitsProcessor]) -> TensorType:
    """The pipe's input type, from what the first processor accepts.

    Parameters
    ----------
    processors : list of LogitsProcessor
        The chain; an empty one gives LOGITS.

    Returns
    -------
    TensorType
        LOGITS or PROBS, whichever is the only one the first processor takes. A processor
        takes a type when its ``legalize`` succeeds for it and the first op returned
        accepts it (``op.IN``).

    Raises
    ------
    LegalizationError
        When the first processor takes both (``TopK``, ``Sample``: pass ``input_type``
        to the pipe) or neither.
    """
    if not processors:
        return TensorType.LOGITS
    first = processors[0]
    name = type(first).__name__
    accepted = _accepted_inputs(first)
    if len(accepted) > 1:
        raise LegalizationError(
            f"Cannot infer input type: {name} can accept both LOGITS and PROBS. "
            "Please specify input_type explicitly when creating the LogitsPipe."
        )
    if not accepted:
        raise LegalizationError(
            f"Processor {name} cannot accept standard pipeline inputs (LOGITS or PROBS)"
        )
    return accepted[0]


def validate_processor_chain(processors: List[LogitsProcessor]) -> None:
    """Checks that a chain infers an input type and legalizes; returns nothing.

    Raises
    ------
    LegalizationError
        ``"Processor chain cannot be empty"``, or the error of inference or legalization.
    """
    if not processors:
        raise LegalizationError("Processor chain cannot be empty")
    legalize_processors(processors, infer_initial_type(processors))
