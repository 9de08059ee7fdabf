"""``LogitsPipe``: the container that infers, legalizes and compiles a processor chain,
then runs it on a tensor with the runtime parameters of each call."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Union

import torch

from .compiler import compile_pipeline
from .fusion_rules import FusionRule
from .legalization import LegalizationError, infer_initial_type, legalize_processors
from .op import Op
from .processors import LogitsProcessor
from .types import TaggedTensor, TensorType
from .validators import CompileError, ValidityCheck

__all__ = ["LogitsPipe"]

logger = logging.getLogger(__name__)


def _names(items: List[Any]) -> str:
    return " -> ".join(type(item).__name__ for item in items)


class LogitsPipe:
    """A declarative logits-processing pipeline: processors in, fused sampling kernels out.

    Construction infers the input type (unless given), legalizes the processors into ops
    (``self.ops``) and, by default, compiles them (``self.compiled_ops``): type check,
    validity checks, fusion. Calling the pipe runs the compiled ops (or, when not compiled,
    the discrete ops with a warning) and returns a plain ``torch.Tensor``.

    Parameters
    ----------
    processors : list of LogitsProcessor
        Applied in order; must not be empty.
    compile : bool, optional
        Compile now (default True). Otherwise call :meth:`compile` later; until then the
        pipe runs the unfused ops and logs ``"Pipeline is not compiled, running discrete
        ops."`` (logger ``aotinfer.logits_processor.pipeline``) on every call.
    input_type : TensorType, optional
        LOGITS or PROBS. Required when the first processor takes both (``TopK``,
        ``Sample``); otherwise inferred from it.
    custom_fusion_rules : list of FusionRule, optional
        Tried together with the default rules, by priority.
    custom_validity_checks : list of ValidityCheck, optional
        Run after the default checks.

    Raises
    ------
    ValueError
        ``"Pipeline cannot be empty"``; ``"Pipeline creation failed: ..."`` when the input
        type cannot be inferred or a processor cannot be legalized;
        ``"Compilation failed: ..."`` when compilation fails.

    Notes
    -----
    Compile-time parameters go to the processors' constructors; runtime parameters
    (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``indices``, ``generator``) are
    keyword arguments of each call, given to every op. Filter parameters may be a scalar
    or a ``(batch_size,)`` tensor; tensors go to the kernels unchanged. A pipe draws random
    numbers exactly as the sampling function its last op calls: with the same generator
    state it returns the same tokens. To capture a sampling pipe in a CUDA graph, pass
    ``seed`` and ``offset`` as int64 tensors instead of a generator (an aotinfer addition;
    rewrite them, and the parameter tensors, between replays).

    Examples
    --------
    >>> pipe = LogitsPipe([Temperature(), Softmax(), TopP(), Sample()])
    >>> pipe.compiled_ops
    [FusedTemperatureSoftmaxOp(LOGITS -> PROBS), FusedProbsTopPSampleOp(PROBS -> INDICES)]
    >>> logits = torch.randn(4, 32000, device="cuda")
    >>> token_ids = pipe(logits, temperature=0.7, top_p=0.9)  # (4,) int32
    >>> prob_pipe = LogitsPipe([TopK(), Sample()], input_type=TensorType.PROBS)
    >>> token_ids = prob_pipe(torch.softmax(logits, dim=-1), top_k=40)
    """

    def __init__(
        self,
        processors: List[LogitsProcessor],
        compile: bool = True,
        input_type: Optional[TensorType] = None,
        custom_fusion_rules: Optional[List[FusionRule]] = None,
        custom_validity_checks: Optional[List[ValidityCheck]] = None,
    ) -> None:
        if isinstance(processors, LogitsProcessor) or not isinstance(processors, (list, tuple)):
            raise ValueError(
                f"processors must be a list of LogitsProcessors, got {processors!r} (a single "
                "processor P is passed as [P])"
            )
        if not processors:
            raise ValueError("Pipeline cannot be empty")
        if input_type is not None and not isinstance(input_type, TensorType):
            raise ValueError(
                f"input_type must be TensorType.LOGITS or TensorType.PROBS, got {input_type!r}"
            )
        self.processors: List[LogitsProcessor] = list(processors)
        for i, p in enumerate(self.processors):
            if not isinstance(p, LogitsProcessor):
                given = (
                    f"the class {p.__name__} (an instance is {p.__name__}())"
                    if isinstance(p, type)
                    else type(p).__name__
                )
                raise ValueError(
                    f"processors[{i}] must be a LogitsProcessor (Temperature(), Softmax(), "
                    f"TopK(), TopP(), MinP(), Sample()), got {given}"
                )
        self.compiled_ops: Optional[List[Op]] = None
        try:
            self._initial_type = input_type or infer_initial_type(self.processors)
            self.ops: List[Op] = legalize_processors(self.processors, self._initial_type)
        except (LegalizationError, CompileError) as e:
            raise ValueError(f"Pipeline creation failed: {e}") from e
        if compile:
            self.compile(custom_fusion_rules, custom_validity_checks)

    @property
    def initial_type(self) -> TensorType:
        """The type a plain input tensor is tagged with: LOGITS or PROBS."""
        return self._initial_type

    def compile(
        self,
        custom_fusion_rules: Optional[List[FusionRule]] = None,
        custom_validity_checks: Optional[List[ValidityCheck]] = None,
    ) -> None:
        """(Re)compiles ``self.ops`` into ``self.compiled_ops``.

        Parameters
        ----------
        custom_fusion_rules : list of FusionRule, optional
            Tried together with the default rules, by priority.
        custom_validity_checks : list of ValidityCheck, optional
            Run after the default checks.

        Raises
        ------
        ValueError
            ``"Compilation failed: {reason}"``; ``compiled_ops`` is left as it was.
        """
        try:
            self.compiled_ops = compile_pipeline(
                self.ops, custom_fusion_rules, custom_validity_checks
            )
        except CompileError as e:
            raise ValueError(f"Compilation failed: {e}") from e

    def __call__(self, x: Union[torch.Tensor, TaggedTensor], **kwargs: Any) -> torch.Tensor:
        """Runs the pipe on ``x`` with the runtime parameters ``kwargs``.

        Parameters
        ----------
        x : torch.Tensor or TaggedTensor
            ``(batch_size, vocab_size)`` logits or probabilities. A plain tensor is tagged
            with :attr:`initial_type`; a ``TaggedTensor`` keeps its own type.
        **kwargs : Any
            Runtime parameters, given to every op.

        Returns
        -------
        torch.Tensor
            Logits, probabilities or token ids, by the last processor.

        Raises
        ------
        ValueError
            ``"Error executing operator {i} ({Name}): {reason}"`` for any error of op ``i``.
        """
        if self.compiled_ops is None:
            if not torch.compiler.is_compiling():  # (dynamo cannot trace a logging call)
                logger.warning("Pipeline is not compiled, running discrete ops.")
            ops = self.ops
        else:
            ops = self.compiled_ops
        if isinstance(x, TaggedTensor):
            tagged = x
        elif self._initial_type == TensorType.PROBS:
            tagged = TaggedTensor.probs(x)
        else:
            tagged = TaggedTensor.logits(x)
        for i, op in enumerate(ops):
            try:
                tagged = op(tagged, **kwargs)
            except Exception as e:
                raise ValueError(f"Error executing operator {i} ({type(op).__name__}): {e}") from e
        return tagged.data

    def __repr__(self) -> str:
        compiled = self.compiled_ops or []
        return (
            f"LogitsPipe([{_names(self.processors)}], ops=[{_names(self.ops)}], "
            f"compiled_ops=[{_names(compiled)}])"
        )
