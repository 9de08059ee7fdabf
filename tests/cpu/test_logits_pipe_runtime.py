"""Running a LogitsPipe on CPU tensors (the reference path): runtime parameters and their
errors, per-row tensors, the uncompiled warning, plain-tensor results, identical tokens to
the direct sampling calls from the same generator state, and agreement between compiled
and uncompiled pipes."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch

from aotinfer import sampling
from aotinfer.logits_processor import (
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
)

L, P = TensorType.LOGITS, TensorType.PROBS
LOGGER = "aotinfer.logits_processor.pipeline"
WARNING = "Pipeline is not compiled, running discrete ops."


def _logits(batch=4, vocab=50, seed=0, scale=2.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, vocab, generator=g) * scale).to(dtype)


def _gen(seed=1234):
    return torch.Generator().manual_seed(seed)


def _clone(g):
    c = torch.Generator()
    c.set_state(g.get_state())
    return c


def _error(pipe, x, **kwargs):
    with pytest.raises(ValueError) as info:
        pipe(x, **kwargs)
    return str(info.value)


# --- runtime parameter checks --------------------------------------------------------------------


@pytest.mark.parametrize("compile", [True, False])
@pytest.mark.parametrize(
    "temperature", [1, 0, 0.0, -0.5, True, "0.7", None, float("nan"), float("inf")]
)
def test_temperature_must_be_positive_float(compile, temperature):
    pipe = LogitsPipe([Temperature(), Softmax()], compile=compile)
    name = "FusedTemperatureSoftmaxOp" if compile else "TemperatureOp"
    assert _error(pipe, _logits(), temperature=temperature) == (
        f"Error executing operator 0 ({name}): Temperature must be positive float or a tensor "
        f"array, got {temperature!r}"
    )


def test_temperature_int_rejected_float_accepted():
    pipe = LogitsPipe([Temperature()])
    x = _logits()
    with pytest.raises(ValueError, match="Temperature must be positive float"):
        pipe(x, temperature=1)
    assert torch.equal(pipe(x, temperature=1.0), x)


@pytest.mark.parametrize(
    "processors, input_type, name",
    [
        ([TopK()], P, "ProbsTopKOp"),
        ([TopK()], L, "LogitsTopKOp"),
        ([TopK(), Sample()], P, "FusedProbsTopKSampleOp"),
        ([TopK(joint_topk_topp=True), TopP(), Sample()], P, "FusedProbsTopKTopPSampleOp"),
    ],
)
@pytest.mark.parametrize("top_k", [0, -3, 2.0, True, "5", None])
def test_top_k_must_be_positive_int(processors, input_type, name, top_k):
    pipe = LogitsPipe(processors, input_type=input_type)
    assert _error(pipe, torch.softmax(_logits(), -1), top_k=top_k, top_p=0.5) == (
        f"Error executing operator 0 ({name}): top_k must be a positive integer or a tensor "
        f"array, got {top_k!r}"
    )


@pytest.mark.parametrize(
    "processors, name",
    [
        ([TopP()], "TopPOp"),
        ([TopP(), Sample()], "FusedProbsTopPSampleOp"),
        ([TopK(joint_topk_topp=True), TopP(), Sample()], "FusedProbsTopKTopPSampleOp"),
    ],
)
@pytest.mark.parametrize("top_p", [0, 0.0, 1.5, -0.1, float("nan"), True, "0.9", None])
def test_top_p_must_be_in_unit_interval(processors, name, top_p):
    pipe = LogitsPipe(processors, input_type=P)
    assert _error(pipe, torch.softmax(_logits(), -1), top_k=3, top_p=top_p) == (
        f"Error executing operator 0 ({name}): top_p must be float in (0, 1] or a tensor array, "
        f"got {top_p!r}"
    )


@pytest.mark.parametrize(
    "processors, name", [([MinP()], "MinPOp"), ([MinP(), Sample()], "FusedProbsMinPSampleOp")]
)
@pytest.mark.parametrize("min_p", [0, 1.01, -1.0, float("nan"), False, None])
def test_min_p_must_be_in_unit_interval(processors, name, min_p):
    pipe = LogitsPipe(processors)
    assert _error(pipe, torch.softmax(_logits(), -1), min_p=min_p) == (
        f"Error executing operator 0 ({name}): min_p must be float in (0, 1] or a tensor array, "
        f"got {min_p!r}"
    )


def test_unit_interval_accepts_one_as_int():
    probs = torch.softmax(_logits(), -1)
    torch.testing.assert_close(LogitsPipe([TopP()])(probs, top_p=1), probs)
    torch.testing.assert_close(
        LogitsPipe([MinP()])(probs, min_p=1), LogitsPipe([MinP()])(probs, min_p=1.0)
    )


@pytest.mark.parametrize(
    "processors, input_type, kwargs, message",
    [
        (
            [Temperature(), Softmax()],
            None,
            {},
            "Error executing operator 0 (FusedTemperatureSoftmaxOp): Required parameter "
            "'temperature' not provided for FusedTemperatureSoftmaxOp",
        ),
        (
            [Softmax(), TopK(), Sample()],
            None,
            {"temprature": 0.5},
            "Error executing operator 1 (FusedProbsTopKSampleOp): Required parameter 'top_k' "
            "not provided for FusedProbsTopKSampleOp",
        ),
        (
            [Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()],
            None,
            {"top_k": 5},
            "Error executing operator 1 (FusedProbsTopKTopPSampleOp): Required parameter "
            "'top_p' not provided for FusedProbsTopKTopPSampleOp",
        ),
        (
            [MinP()],
            None,
            {},
            "Error executing operator 0 (MinPOp): Required parameter 'min_p' not provided for "
            "MinPOp",
        ),
    ],
)
def test_missing_runtime_parameter(processors, input_type, kwargs, message):
    pipe = LogitsPipe(processors, input_type=input_type)
    with pytest.raises(ValueError) as info:
        pipe(_logits(), **kwargs)
    assert str(info.value) == message
    assert isinstance(info.value.__cause__, ValueError)


def test_errors_from_the_sampling_functions_are_wrapped():
    pipe = LogitsPipe([Softmax(), TopK(), Sample()])
    message = _error(pipe, _logits(batch=4), top_k=torch.tensor([1, 2], dtype=torch.int32))
    assert message.startswith("Error executing operator 1 (FusedProbsTopKSampleOp): top_k")
    assert "batch size mismatch" in message
    message = _error(LogitsPipe([Sample()], input_type=L), _logits(), indices=torch.zeros(3))
    assert message.startswith("Error executing operator 0 (LogitsSampleOp): indices")


@pytest.mark.parametrize(
    "processors, kwarg",
    [([Temperature()], "temperature"), ([MinP()], "min_p")],
)
def test_per_row_tensor_checks_of_the_torch_ops(processors, kwarg):
    pipe = LogitsPipe(processors)
    op = type(pipe.compiled_ops[0]).__name__
    x = torch.softmax(_logits(batch=4), -1)
    prefix = f"Error executing operator 0 ({op}): {kwarg}"
    assert _error(pipe, x, **{kwarg: torch.tensor(0.5)}) == (
        f"{prefix}: Expected a 1D tensor of shape (batch_size,) or scalar for the sampling "
        "parameter, but got a 0-dimensional tensor."
    )
    assert _error(pipe, x, **{kwarg: torch.full((4, 1), 0.5)}) == (
        f"{prefix}: Expected a 1D tensor or scalar for the sampling parameter, but got a 2D tensor."
    )
    assert _error(pipe, x, **{kwarg: torch.full((3,), 0.5)}) == (
        f"{prefix}: Sampling parameter tensor batch size mismatch: expected length 4 to match "
        "the reference tensor batch size, but got length 3."
    )
    assert _error(pipe, x, **{kwarg: torch.ones(4, dtype=torch.int32)}) == (
        f"{prefix} tensor must have a floating-point dtype (float32), got int32"
    )


@pytest.mark.parametrize("compile", [True, False])
@pytest.mark.parametrize("processors", [[Temperature()], [MinP()], [Temperature(), Softmax()]])
def test_torch_ops_need_a_matrix(compile, processors):
    """A 1-D row with a per-row parameter broadcast into a (V, V) matrix before."""
    pipe = LogitsPipe(processors, compile=compile)
    op = type((pipe.compiled_ops if compile else pipe.ops)[0]).__name__
    for x in (torch.rand(4), torch.rand(2, 3, 4)):
        message = _error(pipe, x, temperature=torch.ones(4), min_p=torch.full((4,), 0.5))
        assert message.startswith(f"Error executing operator 0 ({op}): ")
        assert "must be a 2-D tensor, got" in message


def test_processors_must_be_logits_processors():
    for bad, given in ((5, "int"), (Softmax, "the class Softmax (an instance is Softmax())")):
        with pytest.raises(ValueError) as e:
            LogitsPipe([Temperature(), bad])
        assert str(e.value) == (
            "processors[1] must be a LogitsProcessor (Temperature(), Softmax(), TopK(), TopP(), "
            f"MinP(), Sample()), got {given}"
        )


# --- per-row tensors -----------------------------------------------------------------------------


@pytest.mark.parametrize("compile", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_per_row_temperature(compile, dtype):
    x = _logits(batch=3, dtype=dtype)
    t = torch.tensor([0.5, 1.0, 2.0])
    probs = LogitsPipe([Temperature(), Softmax()], compile=compile)(x, temperature=t)
    expected = torch.softmax(x.double() / t.double().unsqueeze(-1), -1)
    assert probs.shape == x.shape
    torch.testing.assert_close(
        probs.double(), expected, atol=2e-3 if dtype != torch.float32 else 1e-6, rtol=0
    )
    scaled = LogitsPipe([Temperature()])(x, temperature=t)
    assert scaled.dtype == torch.float32  # (divided in float32: fp16 would overflow)
    for row in range(3):
        torch.testing.assert_close(scaled[row], x[row].float() / t[row])


def test_float64_logits_stay_float64_through_temperature():
    x = _logits(batch=3, dtype=torch.float64)
    t = torch.tensor([0.5, 1.0, 2.0])
    for temperature, want in ((t, x / t.double().unsqueeze(-1)), (0.5, x / 0.5)):
        scaled = LogitsPipe([Temperature()])(x, temperature=temperature)
        assert scaled.dtype == torch.float64
        torch.testing.assert_close(scaled, want, rtol=0, atol=0)


def test_per_row_min_p_matches_scalar_rows():
    probs = torch.softmax(_logits(batch=3, scale=3.0), -1)
    m = torch.tensor([0.05, 0.2, 0.9])
    out = LogitsPipe([MinP()])(probs, min_p=m)
    for row in range(3):
        one = LogitsPipe([MinP()])(probs[row : row + 1], min_p=float(m[row]))
        torch.testing.assert_close(out[row : row + 1], one)


def test_min_p_semantics():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]])
    out = LogitsPipe([MinP()])(probs, min_p=0.5)
    expected = torch.tensor([[0.5, 0.3, 0.0, 0.0], [0.0, 0.4, 0.6, 0.8]])
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(out, expected)


def test_min_p_degenerate_rows_follow_the_renorm_contract():
    """The unfused MinP op treats NaN, negative and infinite probabilities as 0, as the
    renorm kernels do, and leaves a row with nothing to keep all zero (not 0 / 0 = NaN);
    the other rows are untouched by them."""
    nan, inf = float("nan"), float("inf")
    probs = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [0.5, nan, 0.3, 0.1],
            [0.2, inf, -0.4, 0.3],
            [nan, nan, -1.0, inf],
            [0.1, 0.2, 0.3, 0.4],
        ]
    )
    out = LogitsPipe([MinP()])(probs, min_p=0.5)
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [0.5 / 0.8, 0.0, 0.3 / 0.8, 0.0],
            [0.2 / 0.5, 0.0, 0.0, 0.3 / 0.5],
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9],
        ]
    )
    torch.testing.assert_close(out, expected)
    # The same rows through a renorm function: all zero there too.
    assert torch.equal(out[[0, 3]], sampling.top_k_renorm_probs(probs, 4)[[0, 3]])


@pytest.mark.parametrize("compile", [True, False])
def test_per_row_tensors_everywhere(compile):
    x = _logits(batch=4, vocab=40)
    kwargs = dict(
        temperature=torch.tensor([0.5, 0.7, 1.0, 1.3]),
        top_k=torch.tensor([1, 5, 10, 40], dtype=torch.int32),
        top_p=torch.tensor([0.5, 0.8, 0.9, 1.0]),
        min_p=torch.tensor([0.1, 0.2, 0.3, 0.5]),
    )
    for processors in (
        [Temperature(), Softmax(), TopK(), Sample()],
        [Temperature(), Softmax(), TopP(), Sample()],
        [Temperature(), Softmax(), MinP(), Sample()],
        [Temperature(), Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()],
        [Temperature(), Softmax(), TopK(), TopP(), MinP()],
        [Temperature(), TopK(), Sample()],
    ):
        out = LogitsPipe(processors, compile=compile)(x, generator=_gen(), **kwargs)
        assert out.shape[0] == 4
    # top_k = 1 picks the argmax whatever the generator says.
    tokens = LogitsPipe([Temperature(), Softmax(), TopK(), Sample()], compile=compile)(
        x, generator=_gen(), **kwargs
    )
    assert tokens[0] == x[0].argmax()


def test_tensor_parameters_are_passed_unchanged(monkeypatch):
    seen = {}
    real = sampling.top_k_sampling_from_probs

    def spy(probs, top_k, **kwargs):
        seen["top_k"] = top_k
        return real(probs, top_k, **kwargs)

    monkeypatch.setattr(sampling, "top_k_sampling_from_probs", spy)
    top_k = torch.tensor([3, 4], dtype=torch.int64)
    LogitsPipe([Softmax(), TopK(), Sample()])(_logits(batch=2), top_k=top_k)
    assert seen["top_k"] is top_k


def test_top_p_is_deterministic_is_forwarded(monkeypatch):
    seen = []
    real = sampling.top_p_renorm_probs

    def spy(probs, top_p, is_deterministic=False):
        seen.append(is_deterministic)
        return real(probs, top_p, is_deterministic=is_deterministic)

    monkeypatch.setattr(sampling, "top_p_renorm_probs", spy)
    probs = torch.softmax(_logits(), -1)
    LogitsPipe([TopP()])(probs, top_p=0.9)
    LogitsPipe([TopP()])(probs, top_p=0.9, is_deterministic=True)
    LogitsPipe([TopP(is_deterministic=True)])(probs, top_p=0.9)
    assert seen == [False, True, True]


# --- pipe mechanics ------------------------------------------------------------------------------


def test_uncompiled_pipe_warns_each_call(caplog):
    pipe = LogitsPipe([Temperature(), Softmax()], compile=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe(_logits(), temperature=0.5)
        pipe(_logits(), temperature=0.5)
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.getMessage() for r in records] == [WARNING, WARNING]
    assert all(r.levelno == logging.WARNING for r in records)
    caplog.clear()
    pipe.compile()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe(_logits(), temperature=0.5)
        LogitsPipe([Temperature(), Softmax()])(_logits(), temperature=0.5)
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_uncompiled_pipe_does_not_log_while_torch_compile_traces_it(caplog, monkeypatch):
    """dynamo cannot trace a logging call: the warning is left out while compiling."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    pipe = LogitsPipe([Temperature(), Softmax()], compile=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        probs = pipe(_logits(), temperature=0.5)
    assert [r for r in caplog.records if r.name == LOGGER] == []
    torch.testing.assert_close(probs, torch.softmax(_logits() / 0.5, -1))


@pytest.mark.parametrize(
    "processors, input_type, dtype",
    [
        ([Temperature()], None, torch.float32),
        ([Temperature(), Softmax()], None, torch.float32),
        ([Softmax(), TopK()], None, torch.float32),
        ([TopK()], L, torch.float32),
        ([Softmax(), TopP(), Sample()], None, torch.int32),
        ([Sample()], L, torch.int32),
        ([MinP(), Sample()], None, torch.int32),
    ],
)
@pytest.mark.parametrize("tagged", [False, True])
def test_returns_a_plain_tensor(processors, input_type, dtype, tagged):
    pipe = LogitsPipe(processors, input_type=input_type)
    x = _logits()
    if pipe.initial_type is P:
        x = torch.softmax(x, -1)
    if tagged:
        x = TaggedTensor(x, pipe.initial_type)
    out = pipe(x, temperature=0.8, top_k=5, top_p=0.8, min_p=0.1, generator=_gen())
    assert type(out) is torch.Tensor
    assert out.dtype == dtype


def test_plain_input_is_tagged_from_the_initial_type():
    probs = torch.softmax(_logits(), -1)
    torch.testing.assert_close(
        LogitsPipe([TopK()], input_type=P)(probs, top_k=3), sampling.top_k_renorm_probs(probs, 3)
    )
    torch.testing.assert_close(
        LogitsPipe([TopK()], input_type=L)(probs, top_k=3), sampling.top_k_mask_logits(probs, 3)
    )


def test_tagged_input_keeps_its_type():
    pipe = LogitsPipe([TopK()], input_type=L)
    message = _error(pipe, TaggedTensor.probs(torch.ones(1, 4)), top_k=1)
    assert message == (
        "Error executing operator 0 (LogitsTopKOp): Operator LogitsTopKOp cannot accept input "
        "type PROBS. Expected: LOGITS"
    )


class _Recorder(Op):
    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        self.log.append(dict(kwargs))
        kwargs.clear()
        return TaggedTensor(tensor.data, self._validate_input_type(tensor))


class _Record(LogitsProcessor):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def legalize(self, input_type):
        return [_Recorder(self.log)]


@pytest.mark.parametrize("compile", [True, False])
def test_every_op_gets_every_runtime_argument(compile):
    log = []
    pipe = LogitsPipe([_Record(log), Temperature(), _Record(log)], compile=compile)
    pipe(_logits(), temperature=0.5, extra="x")
    assert log == [{"temperature": 0.5, "extra": "x"}] * 2


# --- same tokens as the direct call, from the same generator state -------------------------------


def _direct_cases():
    k, p, m, t = 7, 0.8, 0.2, 0.7
    s = sampling
    return {
        "temperature_softmax_sample": (
            [Temperature(), Softmax(), Sample()],
            None,
            lambda x, g: s.sampling_from_probs(s.softmax(x, temperature=t), generator=g),
        ),
        "temperature_softmax_topk_sample": (
            [Temperature(), Softmax(), TopK(), Sample()],
            None,
            lambda x, g: s.top_k_sampling_from_probs(s.softmax(x, temperature=t), k, generator=g),
        ),
        "softmax_topp_sample": (
            [Softmax(), TopP(), Sample()],
            None,
            lambda x, g: s.top_p_sampling_from_probs(torch.softmax(x, -1), p, generator=g),
        ),
        "softmax_minp_sample": (
            [Softmax(), MinP(), Sample()],
            None,
            lambda x, g: s.min_p_sampling_from_probs(torch.softmax(x, -1), m, generator=g),
        ),
        "softmax_joint_topk_topp_sample": (
            [Softmax(), TopK(joint_topk_topp=True), TopP(), Sample()],
            None,
            lambda x, g: s.top_k_top_p_sampling_from_probs(
                torch.softmax(x, -1), k, p, filter_apply_order="joint", generator=g
            ),
        ),
        "softmax_topk_topp_sample": (
            [Softmax(), TopK(), TopP(), Sample()],
            None,
            lambda x, g: s.top_p_sampling_from_probs(
                s.top_k_renorm_probs(torch.softmax(x, -1), k), p, generator=g
            ),
        ),
        "logits_sample": (
            [Sample()],
            L,
            lambda x, g: s.sampling_from_logits(x, generator=g),
        ),
        "logits_topk_sample": (
            [TopK(), Sample()],
            L,
            lambda x, g: s.sampling_from_logits(s.top_k_mask_logits(x, k), generator=g),
        ),
        "temperature_logits_sample": (
            [Temperature(), Sample()],
            None,
            lambda x, g: s.sampling_from_logits(x / t, generator=g),
        ),
    }, dict(temperature=t, top_k=k, top_p=p, min_p=m)


CASES, KWARGS = _direct_cases()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batch, vocab", [(1, 111), (5, 1000)])
def test_same_tokens_as_direct_call(case, batch, vocab):
    processors, input_type, direct = CASES[case]
    pipe = LogitsPipe(processors, input_type=input_type)
    for seed in range(3):
        x = _logits(batch, vocab, seed=seed)
        g = _gen(seed)
        g_direct = _clone(g)
        tokens = pipe(x, generator=g, **KWARGS)
        expected = direct(x, g_direct)
        assert torch.equal(tokens, expected), (case, seed)
        assert torch.equal(g.get_state(), g_direct.get_state()), "randomness consumed differently"


def test_same_tokens_with_indices_and_per_row_parameters():
    x = _logits(3, 64)
    probs = sampling.softmax(x, temperature=0.9)
    indices = torch.tensor([0, 2, 2, 1, 0, 2], dtype=torch.int64)
    top_k = torch.tensor([2, 5, 64], dtype=torch.int32)
    pipe = LogitsPipe([Temperature(), Softmax(), TopK(), Sample()])
    g = _gen(7)
    tokens = pipe(x, temperature=0.9, top_k=top_k, indices=indices, generator=_clone(g))
    expected = sampling.top_k_sampling_from_probs(probs, top_k, indices=indices, generator=g)
    assert torch.equal(tokens, expected)
    assert tokens.dtype == torch.int64


def test_same_tokens_as_direct_call_from_the_default_generator():
    x = _logits(4, 300)
    pipe = LogitsPipe([Softmax(), TopP(), Sample()])
    torch.manual_seed(99)
    tokens = pipe(x, top_p=0.9)
    torch.manual_seed(99)
    expected = sampling.top_p_sampling_from_probs(torch.softmax(x, -1), 0.9)
    assert torch.equal(tokens, expected)


@pytest.mark.parametrize("compile", [True, False])
def test_seed_and_offset_are_forwarded(compile):
    x = _logits(4, 200)
    pipe = LogitsPipe([Softmax(), TopK(), Sample()], compile=compile)
    state = torch.default_generator.get_state()
    seed = torch.tensor([11, 12, 13, 14])
    offset = torch.tensor([0])
    tokens = pipe(x, top_k=10, seed=seed, offset=offset)
    assert torch.equal(torch.default_generator.get_state(), state)  # no generator involved
    probs = torch.softmax(x, -1)
    if compile:
        expected = sampling.top_k_sampling_from_probs(probs, 10, seed=seed, offset=offset)
    else:
        renormed = sampling.top_k_renorm_probs(probs, 10)
        expected = sampling.sampling_from_probs(renormed, seed=seed, offset=offset)
    assert torch.equal(tokens, expected)
    assert torch.equal(pipe(x, top_k=10, seed=seed, offset=offset), tokens)
    assert torch.equal(
        LogitsPipe([Sample()], input_type=L)(x, seed=3, offset=8),
        sampling.sampling_from_logits(x, seed=3, offset=8),
    )


@pytest.mark.parametrize("compile", [True, False])
def test_same_generator_state_same_tokens(compile):
    pipe = LogitsPipe([Temperature(), Softmax(), TopK(), Sample()], compile=compile)
    x = _logits(6, 500)
    a = pipe(x, temperature=0.8, top_k=20, generator=_gen(5))
    b = pipe(x, temperature=0.8, top_k=20, generator=_gen(5))
    assert torch.equal(a, b)


# --- compiled and uncompiled agree ---------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.1, "per_row"])
@pytest.mark.parametrize("batch, vocab", [(1, 111), (7, 2000)])
@pytest.mark.parametrize("distribution", ["normal", "gumbel"])
def test_compiled_and_uncompiled_probabilities_agree(temperature, batch, vocab, distribution):
    g = torch.Generator().manual_seed(batch * vocab)
    if distribution == "normal":
        x = torch.randn(batch, vocab, generator=g)
    else:
        u = torch.rand(batch, vocab, generator=g).clamp_min(1e-20)
        x = -torch.log(-torch.log(u))
    if temperature == "per_row":
        temperature = torch.rand(batch, generator=g) + 0.1
    for processors in (
        [Temperature(), Softmax()],
        [Temperature(), Softmax(), TopK()],
        [Temperature(), Softmax(), TopP()],
        [Temperature(), Softmax(), MinP()],
        [Temperature(), Softmax(), TopK(), TopP()],
    ):
        kwargs = dict(temperature=temperature, top_k=10, top_p=0.9, min_p=0.05)
        compiled = LogitsPipe(processors)(x, **kwargs)
        uncompiled = LogitsPipe(processors, compile=False)(x, **kwargs)
        torch.testing.assert_close(compiled, uncompiled, atol=1e-5, rtol=0)


def _chi_square_bound(df: int, z: float = 5.0) -> float:
    """Upper bound of a chi-square(df) statistic at about 3e-7 tail (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


@pytest.mark.parametrize(
    "processors, kwargs",
    [
        ([Softmax(), TopK(), Sample()], {"top_k": 4}),
        ([Softmax(), TopP(), Sample()], {"top_p": 0.7}),
        ([Softmax(), MinP(), Sample()], {"min_p": 0.15}),
        ([Temperature(), Softmax(), Sample()], {"temperature": 0.8}),
    ],
)
def test_compiled_and_uncompiled_sample_the_same_distribution(processors, kwargs):
    vocab, samples = 10, 20000
    x = _logits(1, vocab, seed=3)
    indices = torch.zeros(samples, dtype=torch.int32)
    counts = []
    for compile in (True, False):
        pipe = LogitsPipe(processors, compile=compile)
        tokens = pipe(x, indices=indices, generator=_gen(11 + compile), **kwargs)
        counts.append(torch.bincount(tokens.long(), minlength=vocab).double())
    # Expected: the uncompiled chain's probabilities (pure torch / renorm functions).
    probs = LogitsPipe(processors[:-1], compile=False)(x, **kwargs)[0].double()
    probs = probs / probs.sum()
    expected = probs * samples
    kept = expected > 0
    for observed in counts:
        assert observed[~kept].sum() == 0, "a filtered-out token was sampled"
        stat = ((observed[kept] - expected[kept]) ** 2 / expected[kept]).sum().item()
        df = int(kept.sum()) - 1
        assert stat < _chi_square_bound(df), (stat, df)
    # Two-sample test between compiled and uncompiled counts.
    both = counts[0] + counts[1]
    used = both > 0
    stat = ((counts[0][used] - counts[1][used]) ** 2 / both[used]).sum().item()
    assert stat < _chi_square_bound(int(used.sum()) - 1)


def test_unfused_temperature_divides_in_float32_within_softmax_range():
    """fp16 logits over a small temperature overflowed to inf in the logits' dtype, and the
    sampler took the first inf instead of the largest logit; the unfused op now divides in
    float32 and refuses what the fused softmax refuses."""
    logits = (torch.randn(4, 32, generator=torch.Generator().manual_seed(3)) * 3).half()
    pipe = LogitsPipe([Temperature(), Sample()])
    got = pipe(logits, temperature=1e-5, seed=0, offset=0)
    assert got.tolist() == logits.float().argmax(-1).tolist()
    scaled = LogitsPipe([Temperature()])(torch.tensor([[1, 2, 3]]), temperature=torch.tensor([0.3]))
    assert scaled.dtype == torch.float32
    torch.testing.assert_close(scaled, torch.tensor([[1.0, 2.0, 3.0]]) / 0.3)
    unfused = LogitsPipe([Temperature(), Softmax()], compile=False)
    with pytest.raises(ValueError, match="temperature must be in \\[2\\*\\*-126, 2\\*\\*126\\]"):
        unfused(logits.float(), temperature=1e-40)
