"""aotinfer.logits_processor: public names, TensorType, TaggedTensor, the Op base classes
and the processors' reprs."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import pytest
import torch

import aotinfer
from aotinfer import logits_processor as lp
from aotinfer.logits_processor import (
    LogitsProcessor,
    MinP,
    Op,
    ParameterizedOp,
    Sample,
    Softmax,
    TaggedTensor,
    Temperature,
    TensorType,
    TopK,
    TopP,
)
from aotinfer.logits_processor.operators import ProbsTopKOp, SoftmaxOp, TemperatureOp

EXPORTS = {
    "CompileError",
    "Compiler",
    "compile_pipeline",
    "FusionRule",
    "LegalizationError",
    "legalize_processors",
    "Op",
    "ParameterizedOp",
    "LogitsPipe",
    "LogitsProcessor",
    "MinP",
    "Sample",
    "Softmax",
    "Temperature",
    "TopK",
    "TopP",
    "TaggedTensor",
    "TensorType",
}

MODULE_NAMES = {
    "operators": [
        "TemperatureOp",
        "SoftmaxOp",
        "ProbsTopKOp",
        "LogitsTopKOp",
        "TopPOp",
        "MinPOp",
        "ProbsSampleOp",
        "LogitsSampleOp",
        "FusedTemperatureSoftmaxOp",
        "FusedProbsTopKSampleOp",
        "FusedProbsTopPSampleOp",
        "FusedProbsMinPSampleOp",
        "FusedProbsTopKTopPSampleOp",
    ],
    "validators": ["ValidityCheck", "get_default_validity_checks", "validate_pipeline"],
    "fusion_rules": ["get_default_fusion_rules", "FusionRule"],
    "legalization": ["infer_initial_type", "validate_processor_chain", "legalize_processors"],
    "compiler": ["Compiler", "compile_pipeline"],
    "pipeline": ["LogitsPipe"],
    "processors": ["LogitsProcessor", "Temperature", "Softmax", "TopK", "TopP", "MinP", "Sample"],
    "op": ["Op", "ParameterizedOp"],
    "types": ["TensorType", "TaggedTensor"],
}


def test_exports_exactly():
    assert set(lp.__all__) == EXPORTS
    assert len(lp.__all__) == len(EXPORTS)
    for name in EXPORTS:
        assert getattr(lp, name) is not None


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_module_names(module):
    mod = importlib.import_module(f"aotinfer.logits_processor.{module}")
    assert mod.__doc__ and mod.__doc__.strip()
    for name in MODULE_NAMES[module]:
        assert hasattr(mod, name), f"{module}.{name}"


def test_every_public_class_has_a_docstring():
    ops = importlib.import_module("aotinfer.logits_processor.operators")
    classes = [getattr(lp, n) for n in EXPORTS if isinstance(getattr(lp, n), type)]
    classes += [getattr(ops, n) for n in MODULE_NAMES["operators"]]
    for cls in classes:
        doc = cls.__dict__.get("__doc__") or ""
        assert len(doc.strip()) > 40, cls


def test_attribute_access_on_the_package():
    assert aotinfer.logits_processor is lp
    assert aotinfer.logits_processor.LogitsPipe is lp.LogitsPipe


def test_import_aotinfer_does_not_import_logits_processor():
    code = (
        "import sys, aotinfer; "
        "assert 'aotinfer.logits_processor' not in sys.modules; "
        "pipe_cls = aotinfer.logits_processor.LogitsPipe; "
        "from aotinfer import logits_processor; "
        "import aotinfer.logits_processor as m; "
        "assert aotinfer.logits_processor is m is logits_processor; "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_unknown_attribute_still_raises():
    with pytest.raises(AttributeError):
        aotinfer.no_such_thing  # noqa: B018


# --- TensorType ----------------------------------------------------------------------------------


def test_tensor_type_values_str_repr():
    assert [t.name for t in TensorType] == ["LOGITS", "PROBS", "INDICES"]
    assert [t.value for t in TensorType] == [1, 2, 3]
    assert str(TensorType.LOGITS) == "LOGITS"
    assert f"{TensorType.PROBS}" == "PROBS"
    assert repr(TensorType.INDICES) == "TensorType.INDICES"


# --- TaggedTensor --------------------------------------------------------------------------------


def test_tagged_tensor_constructors_and_properties():
    data = torch.zeros(3, 5, dtype=torch.float16)
    for make, kind in [
        (TaggedTensor.logits, TensorType.LOGITS),
        (TaggedTensor.probs, TensorType.PROBS),
        (TaggedTensor.indices, TensorType.INDICES),
    ]:
        t = make(data)
        assert t.type is kind and t.data is data
    t = TaggedTensor(data, TensorType.PROBS)
    assert t.shape == torch.Size([3, 5])
    assert t.dtype == torch.float16
    assert t.device == torch.device("cpu")
    assert t.size() == torch.Size([3, 5])
    assert t.size(1) == 5 and t.size(-2) == 3


def test_tagged_tensor_repr():
    t = TaggedTensor.logits(torch.zeros(2, 7))
    assert repr(t) == (
        "TaggedTensor(type=LOGITS, shape=torch.Size([2, 7]), dtype=torch.float32, device=cpu)"
    )


def test_tagged_tensor_is_frozen_and_slotted():
    t = TaggedTensor.probs(torch.ones(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.data = torch.zeros(1)
    assert not hasattr(t, "__dict__")
    assert [f.name for f in dataclasses.fields(TaggedTensor)] == ["data", "type"]


def test_tagged_tensor_torch_function_unwraps():
    x = torch.randn(2, 6)
    t = TaggedTensor.logits(x)
    out = torch.softmax(t, dim=-1)
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    both = torch.cat([t, TaggedTensor.logits(x)], dim=0)
    assert type(both) is torch.Tensor and both.shape == (4, 6)
    assert torch.equal(torch.add(t, 1), x + 1)
    assert torch.equal(torch.where(torch.ones_like(x, dtype=torch.bool), t, 0.0), x)


# --- Op / ParameterizedOp ------------------------------------------------------------------------


class _Untyped(Op):
    def __call__(self, tensor, **kwargs):
        return tensor


class _HalfTyped(Op):
    IN = TensorType.LOGITS

    def __call__(self, tensor, **kwargs):
        return tensor


class _Scale(ParameterizedOp):
    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __call__(self, tensor, **kwargs):
        out = self._validate_input_type(tensor)
        return TaggedTensor(tensor.data * self._get_param("factor", kwargs), out)


def test_op_requires_in_and_out():
    with pytest.raises(
        ValueError, match=r"^Operator _Untyped must define IN and OUT tensor types$"
    ):
        _Untyped()
    with pytest.raises(ValueError, match=r"^Operator _HalfTyped must define IN and OUT"):
        _HalfTyped()


def test_op_is_abstract():
    with pytest.raises(TypeError):
        Op()

    class NoCall(Op):
        IN = TensorType.LOGITS
        OUT = TensorType.LOGITS

    with pytest.raises(TypeError):
        NoCall()


def test_op_repr_and_input_check():
    assert repr(TemperatureOp()) == "TemperatureOp(LOGITS -> LOGITS)"
    assert repr(SoftmaxOp()) == "SoftmaxOp(LOGITS -> PROBS)"
    assert repr(ProbsTopKOp()) == "ProbsTopKOp(PROBS -> PROBS)"
    op = TemperatureOp()
    assert op._validate_input_type(TaggedTensor.logits(torch.zeros(1, 1))) is TensorType.LOGITS
    with pytest.raises(
        ValueError,
        match=r"^Operator TemperatureOp cannot accept input type PROBS\. Expected: LOGITS$",
    ):
        op._validate_input_type(TaggedTensor.probs(torch.zeros(1, 1)))


def test_parameterized_op_param_precedence():
    op = _Scale(factor=2.0)
    assert op.default_params == {"factor": 2.0}
    x = TaggedTensor.logits(torch.ones(1, 3))
    assert torch.equal(op(x).data, torch.full((1, 3), 2.0))
    assert torch.equal(op(x, factor=5.0).data, torch.full((1, 3), 5.0))
    kwargs = {"factor": 3.0, "other": 1}
    assert op._get_param("factor", kwargs) == 3.0
    assert kwargs == {"other": 1}  # a runtime value is consumed
    assert op._get_param("factor", kwargs) == 2.0  # then the default
    assert op._get_param("missing", kwargs, required=False) is None
    with pytest.raises(ValueError, match=r"^Required parameter 'missing' not provided for _Scale$"):
        op._get_param("missing", kwargs)
    with pytest.raises(ValueError, match=r"^Required parameter 'factor' not provided for _Scale$"):
        _Scale()(x)


# --- processors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "processor, text",
    [
        (Temperature(), "Temperature()"),
        (Softmax(), "Softmax(enable_pdl=None)"),
        (Softmax(enable_pdl=True), "Softmax(enable_pdl=True)"),
        (TopK(), "TopK(joint_topk_topp=False)"),
        (TopK(joint_topk_topp=True, top_k=5), "TopK(joint_topk_topp=True, top_k=5)"),
        (TopP(), "TopP()"),
        (MinP(min_p=0.1), "MinP(min_p=0.1)"),
        (Sample(), "Sample(deterministic=True)"),
        (Sample(deterministic=False), "Sample(deterministic=False)"),
    ],
)
def test_processor_repr(processor, text):
    assert repr(processor) == text


def test_processor_params_become_op_defaults():
    assert TopK(top_k=3).legalize(TensorType.PROBS)[0].default_params == {
        "joint_topk_topp": False,
        "top_k": 3,
    }
    assert Sample().legalize(TensorType.LOGITS)[0].default_params == {"deterministic": True}
    assert Softmax().legalize(TensorType.LOGITS)[0].default_params == {"enable_pdl": None}
    assert Temperature(temperature=0.5).legalize(TensorType.LOGITS)[0].default_params == {
        "temperature": 0.5
    }


def test_logits_processor_is_abstract():
    with pytest.raises(TypeError):
        LogitsProcessor()
