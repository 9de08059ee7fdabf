"""LogitsPipe stages one and two: input-type inference, legalization into ops, and the
errors (with their exact messages) of building a pipe."""

from __future__ import annotations

import pytest
import torch

from aotinfer.logits_processor import (
    LegalizationError,
    LogitsPipe,
    LogitsProcessor,
    MinP,
    Op,
    Sample,
    Softmax,
    TaggedTensor,
    Temperature,
    TensorType,
    TopK,
    TopP,
    legalize_processors,
)
from aotinfer.logits_processor.legalization import infer_initial_type, validate_processor_chain

L, P, IDX = TensorType.LOGITS, TensorType.PROBS, TensorType.INDICES


class _Identity(Op):
    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __call__(self, tensor, **kwargs):
        return TaggedTensor(tensor.data, self._validate_input_type(tensor))


class _SameOpsWhateverAsked(LogitsProcessor):
    """Legalizes to the same LOGITS op for any input type (the seed's custom example)."""

    def legalize(self, input_type):
        return [_Identity(**self.params)]


class _Stubborn(LogitsProcessor):
    def legalize(self, input_type):
        raise ValueError(f"Stubborn cannot be applied to {input_type}")


class _Empty(LogitsProcessor):
    def legalize(self, input_type):
        return []


class _Broken(LogitsProcessor):
    def legalize(self, input_type):
        raise RuntimeError("boom")


def _names(ops):
    return [type(op).__name__ for op in ops]


# --- inference -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "processors, expected",
    [
        ([Temperature()], L),
        ([Softmax(), Sample()], L),
        ([TopP(), Sample()], P),
        ([MinP()], P),
        ([_SameOpsWhateverAsked()], L),
        ([], L),
    ],
)
def test_infer_initial_type(processors, expected):
    assert infer_initial_type(processors) is expected


@pytest.mark.parametrize("first", [TopK(), Sample()])
def test_infer_initial_type_ambiguous(first):
    name = type(first).__name__
    with pytest.raises(LegalizationError) as info:
        infer_initial_type([first])
    assert str(info.value) == (
        f"Cannot infer input type: {name} can accept both LOGITS and PROBS. "
        "Please specify input_type explicitly when creating the LogitsPipe."
    )
    with pytest.raises(ValueError) as info:
        LogitsPipe([first, Sample()] if name == "TopK" else [first])
    assert str(info.value) == (
        f"Pipeline creation failed: Cannot infer input type: {name} can accept both LOGITS "
        "and PROBS. Please specify input_type explicitly when creating the LogitsPipe."
    )
    assert isinstance(info.value.__cause__, LegalizationError)


def test_infer_initial_type_none_accepted():
    with pytest.raises(
        LegalizationError,
        match=r"^Processor _Stubborn cannot accept standard pipeline inputs \(LOGITS or PROBS\)$",
    ):
        infer_initial_type([_Stubborn()])


@pytest.mark.parametrize(
    "processors, input_type, expected",
    [
        ([TopK(), Sample()], P, P),
        ([TopK(), Sample()], L, L),
        ([Sample()], P, P),
        ([Temperature(), Softmax()], None, L),
        ([TopP()], None, P),
    ],
)
def test_initial_type_property(processors, input_type, expected):
    assert LogitsPipe(processors, input_type=input_type).initial_type is expected


# --- legalization --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "processors, initial, ops",
    [
        (
            [Temperature(), Softmax(), TopK(), TopP(), MinP(), Sample()],
            L,
            ["TemperatureOp", "SoftmaxOp", "ProbsTopKOp", "TopPOp", "MinPOp", "ProbsSampleOp"],
        ),
        ([TopK(), Sample()], L, ["LogitsTopKOp", "LogitsSampleOp"]),
        ([TopK(), Sample()], P, ["ProbsTopKOp", "ProbsSampleOp"]),
        ([Temperature(), TopK(), Sample()], L, ["TemperatureOp", "LogitsTopKOp", "LogitsSampleOp"]),
        ([Sample()], P, ["ProbsSampleOp"]),
    ],
)
def test_legalize_processors(processors, initial, ops):
    legalized = legalize_processors(processors, initial)
    assert _names(legalized) == ops
    assert _names(LogitsPipe(processors, input_type=initial).ops) == ops


def test_legalize_default_initial_type_is_logits():
    assert _names(legalize_processors([TopK()])) == ["LogitsTopKOp"]


def test_legalize_empty():
    with pytest.raises(LegalizationError, match=r"^Cannot legalize empty processor list$"):
        legalize_processors([])


@pytest.mark.parametrize(
    "processors, initial, message",
    [
        (
            [Softmax(), Temperature()],
            L,
            "Failed to legalize processor 1 (Temperature): Temperature can only be applied to "
            "LOGITS, got PROBS",
        ),
        (
            [Softmax(), Softmax()],
            L,
            "Failed to legalize processor 1 (Softmax): Softmax can only be applied to LOGITS, "
            "got PROBS",
        ),
        (
            [Temperature(), TopP()],
            L,
            "Failed to legalize processor 1 (TopP): TopP can only be applied to PROBS, got LOGITS",
        ),
        (
            [Temperature(), MinP()],
            L,
            "Failed to legalize processor 1 (MinP): MinP can only be applied to PROBS, got LOGITS",
        ),
        (
            [Sample(), TopK()],
            L,
            "Failed to legalize processor 1 (TopK): TopK cannot be applied to INDICES",
        ),
        (
            [Softmax(), Sample(), Sample()],
            L,
            "Failed to legalize processor 2 (Sample): Sampling cannot be applied to INDICES",
        ),
        (
            [Temperature()],
            P,
            "Failed to legalize processor 0 (Temperature): Temperature can only be applied to "
            "LOGITS, got PROBS",
        ),
        (
            [TopK()],
            IDX,
            "Failed to legalize processor 0 (TopK): TopK cannot be applied to INDICES",
        ),
        (
            [Temperature(), _Empty()],
            L,
            "Failed to legalize processor 1 (_Empty): Processor _Empty produced no ops",
        ),
        ([_Broken()], L, "Failed to legalize processor 0 (_Broken): boom"),
    ],
)
def test_legalization_errors(processors, initial, message):
    with pytest.raises(LegalizationError) as info:
        legalize_processors(processors, initial)
    assert str(info.value) == message
    assert info.value.__cause__ is not None
    with pytest.raises(ValueError) as info:
        LogitsPipe(processors, input_type=initial)
    assert str(info.value) == f"Pipeline creation failed: {message}"


def test_legalization_errors_with_inferred_type():
    with pytest.raises(ValueError) as info:
        LogitsPipe([Temperature(), Softmax(), Softmax()])
    assert str(info.value) == (
        "Pipeline creation failed: Failed to legalize processor 2 (Softmax): Softmax can only "
        "be applied to LOGITS, got PROBS"
    )


def test_empty_pipeline():
    with pytest.raises(ValueError, match=r"^Pipeline cannot be empty$"):
        LogitsPipe([])


def test_input_type_must_be_a_tensor_type():
    with pytest.raises(ValueError, match=r"^input_type must be TensorType\.LOGITS or"):
        LogitsPipe([TopK()], input_type="probs")


def test_processors_are_copied():
    processors = [Temperature(), Softmax()]
    pipe = LogitsPipe(processors)
    processors.append(Sample())
    assert len(pipe.processors) == 2


# --- validate_processor_chain --------------------------------------------------------------------


def test_validate_processor_chain():
    validate_processor_chain([Temperature(), Softmax(), TopP(), Sample()])
    with pytest.raises(LegalizationError, match=r"^Processor chain cannot be empty$"):
        validate_processor_chain([])
    with pytest.raises(LegalizationError, match=r"^Cannot infer input type: TopK"):
        validate_processor_chain([TopK()])
    with pytest.raises(LegalizationError, match=r"^Failed to legalize processor 1 \(TopP\)"):
        validate_processor_chain([Temperature(), TopP()])


def test_unused_input_is_fine():
    # Legalization creates ops; nothing runs until the pipe is called.
    pipe = LogitsPipe([Temperature()])
    assert torch.equal(pipe(torch.ones(1, 2), temperature=2.0), torch.full((1, 2), 0.5))
