"""aotinfer.softmax on CPU tensors (the reference path) against an explicit float64 softmax."""

from __future__ import annotations

import math

import pytest
import torch

import aotinfer
from aotinfer import _views

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _expected(logits, temperature=None):
    """exp(x/T - max) / sum, in float64, from the exact values of ``logits``."""
    x = logits.to(torch.float64)
    if isinstance(temperature, torch.Tensor):
        x = x / temperature.to(torch.float64).unsqueeze(-1)
    elif temperature is not None:
        x = x / temperature
    z = x - x.max(dim=-1, keepdim=True).values
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


def _close(actual, expected):
    assert actual.dtype == torch.float32
    assert actual.shape == expected.shape
    assert not torch.isnan(actual).any()
    torch.testing.assert_close(actual.to(torch.float64), expected, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("vocab", [1, 7, 111, 32000])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_float64(dtype, vocab, batch):
    logits = _randn((batch, vocab), dtype, seed=vocab * 10 + batch)
    probs = aotinfer.softmax(logits)
    _close(probs, _expected(logits))
    torch.testing.assert_close(
        probs.sum(dim=-1), torch.ones(batch, dtype=torch.float32), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("temperature", [0.5, 0.7, 1.3, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scalar_temperature(dtype, temperature):
    logits = _randn((5, 111), dtype, seed=1)
    _close(aotinfer.softmax(logits, temperature=temperature), _expected(logits, temperature))


@pytest.mark.parametrize("temp_dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_row_temperature(dtype, temp_dtype):
    logits = _randn((5, 111), dtype, seed=2)
    temperature = torch.tensor([0.5, 0.8, 1.0, 1.5, 3.0], dtype=temp_dtype)
    probs = aotinfer.softmax(logits, temperature=temperature)
    _close(probs, _expected(logits, temperature.float()))
    # each row uses its own temperature, not the first one
    assert not torch.allclose(probs[0], aotinfer.softmax(logits[:1], 3.0)[0])


def test_temperature_none_is_one():
    logits = _randn((5, 111), seed=3)
    torch.testing.assert_close(aotinfer.softmax(logits), aotinfer.softmax(logits, 1.0))
    torch.testing.assert_close(aotinfer.softmax(logits, None), aotinfer.softmax(logits, 1))


def test_float64_and_strided_logits():
    logits = _randn((111, 5), torch.float64, seed=4).t()  # last dim strided
    assert logits.stride(-1) != 1
    _close(aotinfer.softmax(logits, 0.9), _expected(logits.float(), 0.9))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_minus_inf_gets_zero(dtype):
    logits = _randn((5, 111), dtype, seed=5)
    logits[:, ::3] = -math.inf
    probs = aotinfer.softmax(logits, temperature=0.8)
    assert (probs[:, ::3] == 0).all()
    assert (probs[:, 1::3] > 0).all()
    _close(probs, _expected(logits, 0.8))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_minus_inf_row_and_nan_row_are_nan_alone(dtype):
    logits = _randn((5, 111), dtype, seed=6)
    logits[1] = -math.inf
    logits[3, 17] = math.nan
    probs = aotinfer.softmax(logits)
    assert probs.dtype == torch.float32
    assert torch.isnan(probs[1]).all()
    assert torch.isnan(probs[3]).all()
    good = [0, 2, 4]
    _close(probs[good], _expected(logits[good]))


def test_input_not_modified():
    logits = _randn((5, 111), seed=7)
    copy = logits.clone()
    aotinfer.softmax(logits, temperature=torch.full((5,), 0.5))
    assert torch.equal(logits, copy)


# --- validation: ValueError naming the argument -----------------------------------------


def _logits():
    return _randn((5, 7), seed=8)


@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (_randn((7,), seed=9), "logits must be a 2-D tensor"),
        (_randn((2, 3, 7), seed=9), "logits must be a 2-D tensor"),
        (torch.arange(35, dtype=torch.int64).reshape(5, 7) + 1, "logits must be a floating"),
        (torch.arange(35, dtype=torch.int32).reshape(5, 7) + 1, "logits must be a floating"),
        (_randn((5, 7), seed=9) > 0, "logits must be a floating"),
        (_randn((5, 7), seed=9).to(torch.float8_e4m3fn), "logits must be a floating"),
        ([[1.0, 2.0]], "logits must be a torch.Tensor"),
    ],
    ids=["1-D", "3-D", "int64", "int32", "bool", "float8", "list"],
)
def test_bad_logits(logits, message):
    with pytest.raises(ValueError, match=message):
        aotinfer.softmax(logits)


@pytest.mark.parametrize(
    "temperature",
    [0, 0.0, -0.5, -1, True, False, math.inf, math.nan, "1.0", [1.0] * 5],
    ids=["int-0", "zero", "negative", "negative-int", "True", "False", "inf", "nan", "str", "list"],
)
def test_bad_scalar_temperature(temperature):
    with pytest.raises(ValueError, match="temperature"):
        aotinfer.softmax(_logits(), temperature=temperature)


@pytest.mark.parametrize(
    ("temperature", "message"),
    [
        (torch.tensor(0.7), "0-D tensor"),
        (torch.full((4,), 0.7), "temperature must have length 5"),
        (torch.full((6,), 0.7), "temperature must have length 5"),
        (torch.full((5, 1), 0.7), "temperature must be a scalar or a 1-D tensor"),
        (torch.ones(5, dtype=torch.int64), "temperature tensor must be floating point"),
        (torch.ones(5, dtype=torch.int32), "temperature tensor must be floating point"),
    ],
    ids=["0-D", "short", "long", "2-D", "int64", "int32"],
)
def test_bad_tensor_temperature(temperature, message):
    with pytest.raises(ValueError, match=message):
        aotinfer.softmax(_logits(), temperature=temperature)


@pytest.mark.parametrize(
    "rows, vocab", [(1, 1), (3, 5), (7, 1023), (128, 128256), (5, 151937), (4, 0), (0, 7)]
)
def test_probs_and_workspace_share_one_allocation_as_the_provider_expects(rows, vocab):
    # The provider's rule (split_softmax_workspace_floats in softmax_split.cuh): at least
    # 2 * rows * ceil(vocab / 1024) floats, 8-byte aligned; probs must be the contiguous
    # (rows, vocab) start of the storage so its rows keep the storage's alignment. Both go
    # to the provider as views built from the buffer's pointer.
    from aotinfer._sampling_ops import _probs_and_softmax_workspace

    probs, probs_view, ws_view = _probs_and_softmax_workspace((rows, vocab), torch.device("cpu"))
    assert probs.shape == (rows, vocab) and probs.is_contiguous()
    assert probs.storage_offset() == 0 and probs.dtype == torch.float32
    assert probs_view == _views.view(probs)
    base = probs.untyped_storage().data_ptr()
    ptr, code, shape, strides, device = ws_view
    assert (code, strides, device) == (_views.F32_CODE, (1,), None)
    assert shape == (2 * rows * -(-vocab // 1024),)
    assert (ptr - base) % 16 == 0  # 16 bytes from the storage start
    assert ptr - base >= 4 * probs.numel()  # no overlap
    assert ptr - base + 4 * shape[0] <= probs.untyped_storage().nbytes()  # inside the buffer
