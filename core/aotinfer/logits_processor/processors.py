"""The user-facing processors (``Temperature``, ``Softmax``, ``TopK``, ``TopP``, ``MinP``,
``Sample``) and their base class ``LogitsProcessor``. A processor describes *what* to do;
``legalize`` turns it into the typed ops that do it for a given input type."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional

from .op import Op
from .operators import (
    LogitsSampleOp,
    LogitsTopKOp,
    MinPOp,
    ProbsSampleOp,
    ProbsTopKOp,
    SoftmaxOp,
    TemperatureOp,
    TopPOp,
)
from .types import TensorType

__all__ = ["LogitsProcessor", "MinP", "Sample", "Softmax", "Temperature", "TopK", "TopP"]


class LogitsProcessor(ABC):
    """Base class of the pipeline's processors; subclass it to add your own.

    Parameters
    ----------
    **params : Any
        Compile-time parameters, stored as ``self.params``; the built-in processors hand
        them to their ops as defaults for the runtime parameters.

    Notes
    -----
    A subclass implements :meth:`legalize`, which returns the ops for an input type or
    raises ``ValueError`` for a type it cannot take. ``repr(TopK())`` is
    ``"TopK(joint_topk_topp=False)"``.

    Examples
    --------
    >>> class Negate(LogitsProcessor):
    ...     def legalize(self, input_type):
    ...         if input_type != TensorType.LOGITS:
    ...             raise ValueError(f"Negate can only be applied to LOGITS, got {input_type}")
    ...         return [NegateOp(**self.params)]  # an Op subclass (see Op)
    """

    def __init__(self, **params: Any) -> None:
        self.params: Dict[str, Any] = params

    @abstractmethod
    def legalize(self, input_type: TensorType) -> List[Op]:
        """The ops that implement this processor on an input of type ``input_type``.

        Parameters
        ----------
        input_type : TensorType
            The type of tensor the processor receives.

        Returns
        -------
        list of Op
            One or more ops; the last one's ``OUT`` is the type the next processor gets.

        Raises
        ------
        ValueError
            When the processor cannot take ``input_type``.
        """

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value}" for key, value in self.params.items())
        return f"{type(self).__name__}({args})"


class Temperature(LogitsProcessor):
    """Divides logits by a temperature. LOGITS -> LOGITS.

    Parameters
    ----------
    **params : Any
        Optional compile-time default ``temperature``.

    Notes
    -----
    Runtime: ``temperature``, a positive ``float`` or a ``(batch_size,)`` float tensor (one
    value per request). An ``int`` such as ``1`` is refused; write ``1.0``. Followed by
    :class:`Softmax`, it compiles into one softmax kernel.

    Examples
    --------
    >>> pipe = LogitsPipe([Temperature()])
    >>> pipe(torch.tensor([[1.0, 2.0]]), temperature=0.5)
    tensor([[2., 4.]])
    """

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[TemperatureOp]`` for LOGITS; ValueError for anything else."""
        if input_type != TensorType.LOGITS:
            raise ValueError(f"Temperature can only be applied to LOGITS, got {input_type}")
        return [TemperatureOp(**self.params)]


class Softmax(LogitsProcessor):
    """Turns logits into probabilities. LOGITS -> PROBS.

    Parameters
    ----------
    enable_pdl : bool, optional
        Compile time: programmatic dependent launch for the fused temperature-softmax
        kernel; ``None`` (default) decides from the device.
    **params : Any
        Further compile-time parameters, passed to the op.

    Notes
    -----
    At most one ``Softmax`` per pipeline. Without a preceding :class:`Temperature` it runs
    ``torch.softmax``; after one, the pair compiles into :func:`aotinfer.softmax`.
    """

    def __init__(self, enable_pdl: Optional[bool] = None, **params: Any) -> None:
        super().__init__(enable_pdl=enable_pdl, **params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[SoftmaxOp]`` for LOGITS; ValueError for anything else."""
        if input_type != TensorType.LOGITS:
            raise ValueError(f"Softmax can only be applied to LOGITS, got {input_type}")
        return [SoftmaxOp(**self.params)]


class TopK(LogitsProcessor):
    """Keeps the ``top_k`` most likely tokens of each row.
    LOGITS -> LOGITS (others set to ``-inf``) or PROBS -> PROBS (others zeroed, renormalised).

    Parameters
    ----------
    joint_topk_topp : bool, optional
        Compile time. When True and this ``TopK`` (on probabilities) is followed by
        :class:`TopP` and :class:`Sample`, the three compile into one joint top-k/top-p
        sampler, which applies both filters to the original distribution. Default False:
        top-p then applies to the renormalised top-k distribution.
    **params : Any
        Optional compile-time default ``top_k``.

    Notes
    -----
    Runtime: ``top_k``, a positive ``int`` or a ``(batch_size,)`` int tensor. ``TopK``
    takes both logits and probabilities, so a pipe that starts with it needs
    ``input_type``.

    Examples
    --------
    >>> pipe = LogitsPipe([TopK(), Sample()], input_type=TensorType.PROBS)
    >>> pipe.ops
    [ProbsTopKOp(PROBS -> PROBS), ProbsSampleOp(PROBS -> INDICES)]
    >>> pipe.compiled_ops
    [FusedProbsTopKSampleOp(PROBS -> INDICES)]
    """

    def __init__(self, joint_topk_topp: bool = False, **params: Any) -> None:
        super().__init__(joint_topk_topp=joint_topk_topp, **params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[LogitsTopKOp]`` for LOGITS, ``[ProbsTopKOp]`` for PROBS; ValueError otherwise."""
        if input_type == TensorType.LOGITS:
            return [LogitsTopKOp(**self.params)]
        if input_type == TensorType.PROBS:
            return [ProbsTopKOp(**self.params)]
        raise ValueError(f"TopK cannot be applied to {input_type}")


class TopP(LogitsProcessor):
    """Keeps each row's nucleus: the fewest most likely tokens whose mass reaches ``top_p``,
    renormalised. PROBS -> PROBS.

    Parameters
    ----------
    **params : Any
        Optional compile-time defaults ``top_p`` and ``is_deterministic``.

    Notes
    -----
    Runtime: ``top_p``, a number in (0, 1] or a ``(batch_size,)`` float tensor.
    """

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[TopPOp]`` for PROBS; ValueError for anything else."""
        if input_type != TensorType.PROBS:
            raise ValueError(f"TopP can only be applied to PROBS, got {input_type}")
        return [TopPOp(**self.params)]


class MinP(LogitsProcessor):
    """Keeps the tokens whose probability is at least ``min_p`` times the row's largest,
    renormalised. PROBS -> PROBS.

    Parameters
    ----------
    **params : Any
        Optional compile-time default ``min_p``.

    Notes
    -----
    Runtime: ``min_p``, a number in (0, 1] or a ``(batch_size,)`` float tensor.
    """

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[MinPOp]`` for PROBS; ValueError for anything else."""
        if input_type != TensorType.PROBS:
            raise ValueError(f"MinP can only be applied to PROBS, got {input_type}")
        return [MinPOp(**self.params)]


class Sample(LogitsProcessor):
    """Draws one token id per row. LOGITS -> INDICES or PROBS -> INDICES.

    Parameters
    ----------
    deterministic : bool, optional
        Compile time: deterministic reductions in the sampling kernels. Default True.
    **params : Any
        Further compile-time parameters, passed to the op.

    Notes
    -----
    Runtime (optional): ``indices`` (output ``i`` is drawn from row ``indices[i]``),
    ``generator`` (a ``torch.Generator``; the pipe draws from it exactly as the sampling
    function it compiles to), and, an aotinfer addition, ``seed`` and ``offset`` (explicit
    random state as in the sampling functions; int64 tensors make the pipe capturable in a
    CUDA graph). Nothing may follow ``Sample``. A pipe that starts with it needs
    ``input_type``.
    """

    def __init__(self, deterministic: bool = True, **params: Any) -> None:
        super().__init__(deterministic=deterministic, **params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        """``[LogitsSampleOp]`` for LOGITS, ``[ProbsSampleOp]`` for PROBS; ValueError otherwise."""
        if input_type == TensorType.LOGITS:
            return [LogitsSampleOp(**self.params)]
        if input_type == TensorType.PROBS:
            return [ProbsSampleOp(**self.params)]
        raise ValueError(f"Sampling cannot be applied to {input_type}")
