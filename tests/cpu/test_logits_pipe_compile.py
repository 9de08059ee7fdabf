"""LogitsPipe stage three: the compiler's type check, validity checks (R1, R3, custom),
every default fusion (through compiled_ops and __repr__), fusion priorities, the sliding
window, custom rules, and a custom processor and op as in the mission document."""

from __future__ import annotations

from typing import Any, List

import pytest
import torch

from aotinfer.logits_processor import (
    CompileError,
    Compiler,
    FusionRule,
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
    compile_pipeline,
)
from aotinfer.logits_processor.fusion_rules import get_default_fusion_rules
from aotinfer.logits_processor.operators import (
    FusedProbsMinPSampleOp,
    FusedProbsTopKSampleOp,
    FusedProbsTopKTopPSampleOp,
    FusedProbsTopPSampleOp,
    FusedTemperatureSoftmaxOp,
    LogitsSampleOp,
    MinPOp,
    ProbsSampleOp,
    ProbsTopKOp,
    SoftmaxOp,
    TemperatureOp,
    TopPOp,
)
from aotinfer.logits_processor.validators import (
    get_default_validity_checks,
    indices_terminal_rule,
    single_softmax_rule,
    validate_pipeline,
)

L, P, IDX = TensorType.LOGITS, TensorType.PROBS, TensorType.INDICES


def _names(ops):
    return [type(op).__name__ for op in ops]


def _typed_op(name: str, in_type: TensorType, out_type: TensorType) -> type:
    """An op class that tags its input's data with ``out_type``."""

    def call(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        return TaggedTensor(tensor.data, self._validate_input_type(tensor))

    return type(name, (Op,), {"IN": in_type, "OUT": out_type, "__call__": call})


ProbsToLogits = _typed_op("ProbsToLogits", P, L)
IndicesIdentity = _typed_op("IndicesIdentity", IDX, IDX)
LogitsA = _typed_op("LogitsA", L, L)
LogitsB = _typed_op("LogitsB", L, L)
LogitsC = _typed_op("LogitsC", L, L)
LogitsD = _typed_op("LogitsD", L, L)
FusedX = _typed_op("FusedX", L, L)
FusedY = _typed_op("FusedY", L, L)


class _Emit(LogitsProcessor):
    """Legalizes to fresh instances of the given op classes, whatever the input type."""

    def __init__(self, *op_classes: type):
        super().__init__()
        self.op_classes = op_classes

    def legalize(self, input_type):
        return [cls() for cls in self.op_classes]


# --- type check ----------------------------------------------------------------------------------


def test_compile_empty():
    with pytest.raises(CompileError, match=r"^Cannot compile empty operator list$"):
        compile_pipeline([])
    with pytest.raises(CompileError, match=r"^Cannot compile empty operator list$"):
        Compiler().compile([])


def test_first_op_must_take_logits_or_probs():
    with pytest.raises(CompileError) as info:
        compile_pipeline([IndicesIdentity()])
    assert str(info.value) == (
        "First operator (IndicesIdentity) cannot accept standard pipeline inputs. Expected "
        "LOGITS or PROBS, but operator accepts: INDICES"
    )


def test_type_mismatch():
    with pytest.raises(CompileError) as info:
        compile_pipeline([SoftmaxOp(), TemperatureOp()])
    assert str(info.value) == (
        "Type mismatch at operator 1 (TemperatureOp). Expected input type: PROBS, but operator "
        "accepts: LOGITS. Previous operator output: PROBS"
    )
    with pytest.raises(CompileError, match=r"^Type mismatch at operator 2 \(ProbsSampleOp\)"):
        compile_pipeline([TemperatureOp(), LogitsSampleOp(), ProbsSampleOp()])


def test_type_mismatch_through_pipe_from_a_custom_processor():
    with pytest.raises(ValueError) as info:
        LogitsPipe([Softmax(), _Emit(LogitsA)])
    assert str(info.value) == (
        "Compilation failed: Type mismatch at operator 1 (LogitsA). Expected input type: PROBS, "
        "but operator accepts: LOGITS. Previous operator output: PROBS"
    )
    # Not compiled: the pipe builds, and the mismatch shows when it runs.
    pipe = LogitsPipe([Softmax(), _Emit(LogitsA)], compile=False)
    with pytest.raises(ValueError, match=r"^Error executing operator 1 \(LogitsA\): Operator"):
        pipe(torch.zeros(1, 3))


# --- validity checks -----------------------------------------------------------------------------


def test_default_validity_checks_order():
    assert get_default_validity_checks() == [single_softmax_rule, indices_terminal_rule]
    assert Compiler().validity_checks == [single_softmax_rule, indices_terminal_rule]


def test_r1_single_softmax():
    ops = [SoftmaxOp(), ProbsToLogits(), SoftmaxOp()]
    message = "Multiple Softmax operators found. Only one Softmax is allowed per pipeline."
    with pytest.raises(CompileError) as info:
        compile_pipeline(ops)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        LogitsPipe([Softmax(), _Emit(ProbsToLogits), Softmax()])
    assert str(info.value) == f"Compilation failed: {message}"
    assert isinstance(info.value.__cause__, CompileError)
    single_softmax_rule([SoftmaxOp(), ProbsSampleOp()])  # one is fine


def test_r3_indices_terminal():
    message = (
        "No operator may follow one that outputs Indices. Found IndicesIdentity after "
        "LogitsSampleOp which outputs Indices."
    )
    with pytest.raises(CompileError) as info:
        compile_pipeline([LogitsSampleOp(), IndicesIdentity()])
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        LogitsPipe([Sample(), _Emit(IndicesIdentity)], input_type=L)
    assert str(info.value) == f"Compilation failed: {message}"
    indices_terminal_rule([TemperatureOp(), LogitsSampleOp()])  # last is fine


def test_validate_pipeline():
    validate_pipeline([SoftmaxOp(), ProbsSampleOp()])
    with pytest.raises(CompileError, match=r"^Pipeline cannot be empty$"):
        validate_pipeline([])
    seen = []
    validate_pipeline([TemperatureOp()], [seen.append])
    assert _names(seen[0]) == ["TemperatureOp"]
    with pytest.raises(CompileError, match=r"^Multiple Softmax"):
        validate_pipeline([SoftmaxOp(), ProbsToLogits(), SoftmaxOp()], [seen.append])


def _no_min_p(ops: List[Op]) -> None:
    if any(isinstance(op, MinPOp) for op in ops):
        raise CompileError("MinP is not allowed here")


def test_custom_validity_check_through_constructor():
    LogitsPipe([Softmax(), TopP(), Sample()], custom_validity_checks=[_no_min_p])
    with pytest.raises(ValueError) as info:
        LogitsPipe([Softmax(), MinP(), Sample()], custom_validity_checks=[_no_min_p])
    assert str(info.value) == "Compilation failed: MinP is not allowed here"


def test_custom_validity_check_through_compile():
    pipe = LogitsPipe([Softmax(), MinP(), Sample()], compile=False)
    assert pipe.compiled_ops is None
    with pytest.raises(ValueError, match=r"^Compilation failed: MinP is not allowed here$"):
        pipe.compile(custom_validity_checks=[_no_min_p])
    assert pipe.compiled_ops is None
    pipe.compile()
    assert _names(pipe.compiled_ops) == ["SoftmaxOp", "FusedProbsMinPSampleOp"]


def test_custom_validity_check_sees_unfused_ops_after_defaults():
    seen = []
    LogitsPipe([Temperature(), Softmax(), TopK(), Sample()], custom_validity_checks=[seen.append])
    assert _names(seen[0]) == ["TemperatureOp", "SoftmaxOp", "ProbsTopKOp", "ProbsSampleOp"]
    # The default checks run first.
    with pytest.raises(ValueError, match=r"^Compilation failed: Multiple Softmax"):
        LogitsPipe(
            [Softmax(), _Emit(ProbsToLogits), Softmax(), MinP()],
            custom_validity_checks=[_no_min_p],
        )


def test_validity_check_errors_other_than_compile_error_propagate():
    def broken(ops):
        raise KeyError("oops")

    with pytest.raises(KeyError):
        LogitsPipe([Temperature()], custom_validity_checks=[broken])


# --- default fusions -----------------------------------------------------------------------------


DEFAULT_FUSIONS = [
    (
        [Temperature(), Softmax()],
        None,
        "LogitsPipe([Temperature -> Softmax], ops=[TemperatureOp -> SoftmaxOp], "
        "compiled_ops=[FusedTemperatureSoftmaxOp])",
    ),
    (
        [Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()],
        None,
        "LogitsPipe([Softmax -> TopK -> TopP -> Sample], ops=[SoftmaxOp -> ProbsTopKOp -> TopPOp "
        "-> ProbsSampleOp], compiled_ops=[SoftmaxOp -> FusedProbsTopKTopPSampleOp])",
    ),
    (
        [Softmax(), TopK(), TopP(), Sample()],
        None,
        "LogitsPipe([Softmax -> TopK -> TopP -> Sample], ops=[SoftmaxOp -> ProbsTopKOp -> TopPOp "
        "-> ProbsSampleOp], compiled_ops=[SoftmaxOp -> ProbsTopKOp -> FusedProbsTopPSampleOp])",
    ),
    (
        [TopK(), Sample()],
        P,
        "LogitsPipe([TopK -> Sample], ops=[ProbsTopKOp -> ProbsSampleOp], "
        "compiled_ops=[FusedProbsTopKSampleOp])",
    ),
    (
        [TopP(), Sample()],
        None,
        "LogitsPipe([TopP -> Sample], ops=[TopPOp -> ProbsSampleOp], "
        "compiled_ops=[FusedProbsTopPSampleOp])",
    ),
    (
        [MinP(), Sample()],
        None,
        "LogitsPipe([MinP -> Sample], ops=[MinPOp -> ProbsSampleOp], "
        "compiled_ops=[FusedProbsMinPSampleOp])",
    ),
    (
        [Temperature(), Softmax(), TopK(), Sample(deterministic=True)],
        None,
        "LogitsPipe([Temperature -> Softmax -> TopK -> Sample], ops=[TemperatureOp -> SoftmaxOp "
        "-> ProbsTopKOp -> ProbsSampleOp], compiled_ops=[FusedTemperatureSoftmaxOp -> "
        "FusedProbsTopKSampleOp])",
    ),
    (
        [Temperature(), Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()],
        None,
        "LogitsPipe([Temperature -> Softmax -> TopK -> TopP -> Sample], ops=[TemperatureOp -> "
        "SoftmaxOp -> ProbsTopKOp -> TopPOp -> ProbsSampleOp], compiled_ops=["
        "FusedTemperatureSoftmaxOp -> FusedProbsTopKTopPSampleOp])",
    ),
    (
        [Temperature(), Softmax(), MinP(), TopP(), Sample()],
        None,
        "LogitsPipe([Temperature -> Softmax -> MinP -> TopP -> Sample], ops=[TemperatureOp -> "
        "SoftmaxOp -> MinPOp -> TopPOp -> ProbsSampleOp], compiled_ops=["
        "FusedTemperatureSoftmaxOp -> MinPOp -> FusedProbsTopPSampleOp])",
    ),
    # Not fused: top-k on logits then sampling, temperature then sampling from logits.
    (
        [TopK(), Sample()],
        L,
        "LogitsPipe([TopK -> Sample], ops=[LogitsTopKOp -> LogitsSampleOp], "
        "compiled_ops=[LogitsTopKOp -> LogitsSampleOp])",
    ),
    (
        [Temperature(), Sample()],
        None,
        "LogitsPipe([Temperature -> Sample], ops=[TemperatureOp -> LogitsSampleOp], "
        "compiled_ops=[TemperatureOp -> LogitsSampleOp])",
    ),
    (
        [Softmax(), TopK(), MinP()],
        None,
        "LogitsPipe([Softmax -> TopK -> MinP], ops=[SoftmaxOp -> ProbsTopKOp -> MinPOp], "
        "compiled_ops=[SoftmaxOp -> ProbsTopKOp -> MinPOp])",
    ),
]


@pytest.mark.parametrize("processors, input_type, text", DEFAULT_FUSIONS)
def test_default_fusions(processors, input_type, text):
    pipe = LogitsPipe(processors, input_type=input_type)
    assert repr(pipe) == text
    compiled = text.split("compiled_ops=[")[1].rstrip("])")
    assert " -> ".join(_names(pipe.compiled_ops)) == compiled
    uncompiled = LogitsPipe(processors, input_type=input_type, compile=False)
    assert repr(uncompiled) == text.split("compiled_ops=[")[0] + "compiled_ops=[])"
    assert uncompiled.compiled_ops is None


def test_compile_later_and_ops_unchanged():
    pipe = LogitsPipe([Temperature(), Softmax(), TopK(), Sample()], compile=False)
    ops_before = list(pipe.ops)
    pipe.compile()
    assert pipe.ops == ops_before
    assert _names(pipe.compiled_ops) == ["FusedTemperatureSoftmaxOp", "FusedProbsTopKSampleOp"]


def test_compile_pipeline_does_not_modify_its_input():
    ops = [TemperatureOp(), SoftmaxOp(), ProbsTopKOp(), ProbsSampleOp()]
    copy = list(ops)
    out = compile_pipeline(ops)
    assert ops == copy
    assert out is not ops


def test_default_rule_table():
    rules = get_default_fusion_rules()
    assert [(r.pattern, r.prio) for r in rules] == [
        ((TemperatureOp, SoftmaxOp), 100),
        ((ProbsTopKOp, TopPOp, ProbsSampleOp), 100),
        ((ProbsTopKOp, ProbsSampleOp), 10),
        ((TopPOp, ProbsSampleOp), 10),
        ((MinPOp, ProbsSampleOp), 10),
    ]
    assert FusionRule((TemperatureOp,), bool, TemperatureOp).prio == 0
    assert FusionRule._fields == ("pattern", "guard", "build", "prio")


def test_fused_ops_keep_compile_time_parameters():
    pipe = LogitsPipe(
        [Temperature(temperature=0.5), Softmax(enable_pdl=True), TopK(top_k=3), Sample(False)]
    )
    fused_softmax, fused_sample = pipe.compiled_ops
    assert isinstance(fused_softmax, FusedTemperatureSoftmaxOp)
    assert fused_softmax.default_params["enable_pdl"] is True
    assert fused_softmax.default_params["temperature"] == 0.5
    assert isinstance(fused_sample, FusedProbsTopKSampleOp)
    assert fused_sample.default_params["deterministic"] is False
    assert fused_sample.default_params["top_k"] == 3
    # So the compiled pipe needs no runtime parameters either.
    out = pipe(torch.randn(2, 10), generator=torch.Generator().manual_seed(0))
    assert out.shape == (2,)


@pytest.mark.parametrize(
    "processors, fused_cls",
    [
        ([TopP(), Sample(deterministic=False)], FusedProbsTopPSampleOp),
        ([MinP(), Sample(deterministic=False)], FusedProbsMinPSampleOp),
        (
            [TopK(joint_topk_topp=True), TopP(), Sample(deterministic=False)],
            FusedProbsTopKTopPSampleOp,
        ),
    ],
)
def test_fused_samplers_take_deterministic_from_sample(processors, fused_cls):
    pipe = LogitsPipe(processors, input_type=P)
    (fused,) = pipe.compiled_ops
    assert type(fused) is fused_cls
    assert fused.default_params["deterministic"] is False
    assert (
        LogitsPipe(processors[:-1] + [Sample()], input_type=P)
        .compiled_ops[0]
        .default_params["deterministic"]
    )


# --- priorities, guards, custom rules ------------------------------------------------------------


def _rule(pattern, build_cls, prio, guard=lambda window: True):
    return FusionRule(pattern=pattern, guard=guard, build=lambda window: build_cls(), prio=prio)


CustomTopKSample = _typed_op("CustomTopKSample", P, IDX)
CustomTemperatureSoftmax = _typed_op("CustomTemperatureSoftmax", L, P)


def test_register_fusion_rule_sorts_stably_by_priority():
    compiler = Compiler()
    a = _rule((LogitsA,), FusedX, 10)
    b = _rule((LogitsB,), FusedX, 50)
    c = _rule((LogitsC,), FusedX, 100)
    d = _rule((LogitsD,), FusedX, 0)
    for rule in (a, b, c, d):
        compiler.register_fusion_rule(rule)
    prios = [r.prio for r in compiler.fusion_rules]
    assert prios == sorted(prios, reverse=True)
    defaults = get_default_fusion_rules()
    names = [r.pattern for r in compiler.fusion_rules]
    assert names == [
        defaults[0].pattern,
        defaults[1].pattern,
        c.pattern,
        b.pattern,
        defaults[2].pattern,
        defaults[3].pattern,
        defaults[4].pattern,
        a.pattern,
        d.pattern,
    ]


def test_custom_rule_with_higher_priority_wins():
    rule = _rule((ProbsTopKOp, ProbsSampleOp), CustomTopKSample, 20)
    pipe = LogitsPipe([TopK(), Sample()], input_type=P, custom_fusion_rules=[rule])
    assert _names(pipe.compiled_ops) == ["CustomTopKSample"]


def test_custom_rule_with_equal_priority_comes_after_the_default():
    rule = _rule((ProbsTopKOp, ProbsSampleOp), CustomTopKSample, 10)
    pipe = LogitsPipe([TopK(), Sample()], input_type=P, custom_fusion_rules=[rule])
    assert _names(pipe.compiled_ops) == ["FusedProbsTopKSampleOp"]


def test_custom_rule_below_the_builtin_temperature_softmax_rule_loses():
    # prio 20 beats the samplers' 10 but not Temperature+Softmax's 100.
    low = _rule((TemperatureOp, SoftmaxOp), CustomTemperatureSoftmax, 20)
    pipe = LogitsPipe([Temperature(), Softmax(), Sample()], custom_fusion_rules=[low])
    assert _names(pipe.compiled_ops) == ["FusedTemperatureSoftmaxOp", "ProbsSampleOp"]
    high = _rule((TemperatureOp, SoftmaxOp), CustomTemperatureSoftmax, 200)
    pipe = LogitsPipe([Temperature(), Softmax(), Sample()], custom_fusion_rules=[high])
    assert _names(pipe.compiled_ops) == ["CustomTemperatureSoftmax", "ProbsSampleOp"]


def test_patterns_name_op_classes_not_processor_classes():
    # The mission document's example writes pattern=(Temperature, Softmax): processors
    # are never in an op chain, so such a rule never matches.
    rule = _rule((Temperature, Softmax), CustomTemperatureSoftmax, 200)
    pipe = LogitsPipe([Temperature(), Softmax(), Sample()], custom_fusion_rules=[rule])
    assert _names(pipe.compiled_ops) == ["FusedTemperatureSoftmaxOp", "ProbsSampleOp"]


def test_guard_false_falls_through_to_the_next_rule():
    seen = []

    def guard(window):
        seen.append(_names(window))
        return False

    rule = _rule((ProbsTopKOp, ProbsSampleOp), CustomTopKSample, 20, guard)
    pipe = LogitsPipe([TopK(), Sample()], input_type=P, custom_fusion_rules=[rule])
    assert _names(pipe.compiled_ops) == ["FusedProbsTopKSampleOp"]
    assert seen == [["ProbsTopKOp", "ProbsSampleOp"]]


def test_joint_guard_reads_topk_parameter():
    rules = get_default_fusion_rules()
    joint = rules[1]
    assert joint.guard([ProbsTopKOp(joint_topk_topp=True), TopPOp(), ProbsSampleOp()])
    assert not joint.guard([ProbsTopKOp(joint_topk_topp=False), TopPOp(), ProbsSampleOp()])
    assert not joint.guard([ProbsTopKOp(), TopPOp(), ProbsSampleOp()])


def test_pattern_match_is_isinstance():
    class MyTopK(ProbsTopKOp):
        pass

    class MyTopKProcessor(LogitsProcessor):
        def legalize(self, input_type):
            if input_type != P:
                raise ValueError("probs only")
            return [MyTopK()]

    pipe = LogitsPipe([MyTopKProcessor(), Sample()])
    assert _names(pipe.compiled_ops) == ["FusedProbsTopKSampleOp"]


def test_sliding_window_steps_back_one_after_a_fusion():
    # (TopPOp, ProbsSampleOp) fuses at position 1; stepping back one lets a custom rule
    # fuse the softmax with the fused sampler at position 0.
    rule = _rule((SoftmaxOp, FusedProbsTopPSampleOp), _typed_op("AllInOne", L, IDX), 5)
    pipe = LogitsPipe([Softmax(), TopP(), Sample()], custom_fusion_rules=[rule])
    assert _names(pipe.compiled_ops) == ["AllInOne"]


def test_sliding_window_steps_back_only_one():
    # A fusion at position 2 enables a pattern starting at 0: one step back does not reach
    # it (FlashInfer's compiler behaves the same).
    rules = [
        _rule((LogitsC, LogitsD), FusedX, 10),
        _rule((LogitsA, LogitsB, FusedX), FusedY, 10),
    ]
    ops = [LogitsA(), LogitsB(), LogitsC(), LogitsD()]
    assert _names(compile_pipeline(ops, rules)) == ["LogitsA", "LogitsB", "FusedX"]
    # Position 1 is within reach.
    rules[1] = _rule((LogitsB, FusedX), FusedY, 10)
    assert _names(compile_pipeline(ops, rules)) == ["LogitsA", "FusedY"]


def test_fusion_repeats_until_nothing_matches():
    rules = [_rule((LogitsA, LogitsA), LogitsA, 1)]
    assert _names(compile_pipeline([LogitsA() for _ in range(5)], rules)) == ["LogitsA"]


def test_custom_rules_through_compile():
    pipe = LogitsPipe([TopK(), Sample()], input_type=P, compile=False)
    pipe.compile(custom_fusion_rules=[_rule((ProbsTopKOp, ProbsSampleOp), CustomTopKSample, 20)])
    assert _names(pipe.compiled_ops) == ["CustomTopKSample"]
    pipe.compile()  # a fresh compiler each time: the custom rule is gone
    assert _names(pipe.compiled_ops) == ["FusedProbsTopKSampleOp"]


# --- the mission document's extension example ----------------------------------------------------


class CustomOp(Op):
    """Doubles the logits."""

    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        return TaggedTensor(tensor.data * 2, self._validate_input_type(tensor))


class CustomLogitsProcessor(LogitsProcessor):
    def __init__(self, **params: Any):
        super().__init__(**params)

    def legalize(self, input_type: TensorType) -> List[Op]:
        return [CustomOp(**self.params)]


def test_custom_processor_and_op():
    pipe = LogitsPipe([CustomLogitsProcessor()])
    assert pipe.initial_type is L  # inferred from CustomOp.IN
    assert _names(pipe.compiled_ops) == ["CustomOp"]
    assert repr(pipe) == (
        "LogitsPipe([CustomLogitsProcessor], ops=[CustomOp], compiled_ops=[CustomOp])"
    )
    x = torch.randn(2, 5)
    out = pipe(x)
    assert type(out) is torch.Tensor
    assert torch.equal(out, x * 2)


def test_custom_op_in_a_pipeline_with_builtin_processors():
    pipe = LogitsPipe([CustomLogitsProcessor(), Temperature(), Softmax(), Sample()])
    assert _names(pipe.compiled_ops) == ["CustomOp", "FusedTemperatureSoftmaxOp", "ProbsSampleOp"]
    x = torch.randn(3, 7)
    g = torch.Generator().manual_seed(1)
    probs = LogitsPipe([CustomLogitsProcessor(), Temperature(), Softmax()])(x, temperature=0.5)
    torch.testing.assert_close(probs, torch.softmax(x * 2 / 0.5, dim=-1))
    assert pipe(x, temperature=0.5, generator=g).shape == (3,)


class CustomTemperatureSoftmaxOp(Op):
    """softmax(2 * logits), standing in for a user's fused kernel."""

    IN = TensorType.LOGITS
    OUT = TensorType.PROBS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        return TaggedTensor(torch.softmax(tensor.data * 2, -1), self._validate_input_type(tensor))


def test_custom_fusion_rule_example():
    def custom_fusion_guard(window: List[Op]) -> bool:
        return True

    def build_custom_fusion(window: List[Op]) -> Op:
        return CustomTemperatureSoftmaxOp()

    custom_rule = FusionRule(
        pattern=(TemperatureOp, SoftmaxOp),
        guard=custom_fusion_guard,
        build=build_custom_fusion,
        prio=200,
    )
    pipe = LogitsPipe([Temperature(), Softmax(), Sample()], custom_fusion_rules=[custom_rule])
    assert _names(pipe.compiled_ops) == ["CustomTemperatureSoftmaxOp", "ProbsSampleOp"]
    tokens = pipe(torch.randn(4, 9), generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (4,) and tokens.dtype == torch.int32


def test_bad_pipe_arguments_and_rules_are_value_errors():
    """They failed inside the constructor or the compiler before (TypeError 'not
    iterable', AttributeError 'prio'), a self-matching one-op rule hung, and a build that
    returned a non-Op failed only when the pipe ran."""
    with pytest.raises(ValueError, match="processors must be a list of LogitsProcessors"):
        LogitsPipe(Softmax())
    for rules, text in [
        (5, "custom_fusion_rules must be a list, got 5"),
        ([5], "a fusion rule must be a FusionRule"),
        ([FusionRule((SoftmaxOp,), lambda w: True, lambda w: SoftmaxOp(), "high")], "int prio"),
        ([FusionRule((SoftmaxOp,), lambda w: True, lambda w: 5, 1)], "built 5, not an Op"),
        ([FusionRule((SoftmaxOp,), lambda w: True, lambda w: SoftmaxOp(), 1)], "did not settle"),
    ]:
        with pytest.raises(ValueError, match=text):
            LogitsPipe([Softmax(), Sample()], custom_fusion_rules=rules)
