"""What an eager sampling call hands the provider, checked on CPU: meta tensors stand in for
CUDA tensors (they take the provider path, and allocate nothing) and a recording fake
stands in for the provider's kernel module."""

from __future__ import annotations

import pytest
import torch

import aotinfer
from aotinfer import _sampling_ops, _views

# kernels.sample's positional arguments (sampling_bindings.cpp)
SAMPLES, VALID, SEED, OFFSET = 3, 4, 13, 15


@pytest.fixture
def calls(monkeypatch):
    recorded = []

    class Kernels:
        def sample(self, *args):
            recorded.append(args)

    kernels = Kernels()
    monkeypatch.setattr(_views, "check_device_supported", lambda name, t: None)
    monkeypatch.setattr(_views, "stream_handle", lambda device: 0)
    monkeypatch.setattr(_sampling_ops, "kernels_for", lambda device: kernels)
    return recorded


@pytest.fixture
def probs():
    return torch.empty(3, 100, device="meta")


def test_valid_is_neither_allocated_nor_passed_unless_returned(calls, probs):
    samples = aotinfer.top_k_sampling_from_probs(probs, 5, seed=1, offset=2)
    assert isinstance(samples, torch.Tensor)
    assert samples.shape == (3,) and samples.dtype == torch.int32
    assert calls[-1][VALID] is None
    assert calls[-1][SAMPLES][1:4] == (_views.DTYPE_CODES[torch.int32], (3,), (1,))


def test_valid_is_passed_when_returned(calls, probs):
    samples, valid = aotinfer.top_p_sampling_from_probs(
        probs, 0.9, seed=1, offset=2, return_valid=True
    )
    assert valid.shape == (3,) and valid.dtype == torch.bool
    assert calls[-1][VALID][1:4] == (_views.BOOL_CODE, (3,), (1,))


@pytest.mark.parametrize(
    "draw",
    [
        lambda p: aotinfer.sampling_from_logits(p, seed=7, offset=8),
        lambda p: aotinfer.top_k_top_p_sampling_from_logits(p, 5, 0.9, seed=7, offset=8),
        lambda p: aotinfer.min_p_sampling_from_probs(p, 0.5, seed=7, offset=8),
    ],
)
def test_functions_without_valid_pass_none(calls, probs, draw, monkeypatch):
    # top_k_top_p_sampling_from_logits masks and softmaxes first: those calls are not timed
    # here, so they are made no-ops that keep the shape
    monkeypatch.setattr(_sampling_ops, "top_k_mask", lambda logits, *a: logits)
    monkeypatch.setattr(_sampling_ops, "softmax", lambda logits, *a: logits)
    out = draw(probs)
    assert isinstance(out, torch.Tensor) and out.shape == (3,)
    assert calls[-1][VALID] is None
    assert (calls[-1][SEED], calls[-1][OFFSET]) == (7, 8)


def test_indices_set_the_batch_and_the_dtype(calls, probs):
    indices = torch.zeros(5, dtype=torch.int64, device="meta")
    samples, valid = aotinfer.sampling_from_probs(
        probs, indices, seed=1, offset=2, return_valid=True
    )
    assert samples.shape == (5,) and samples.dtype == torch.int64 and valid.shape == (5,)
    assert calls[-1][SAMPLES][1:3] == (_views.DTYPE_CODES[torch.int64], (5,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 100), (1, 1), (2, 7)])
def test_renorm_mask_and_softmax_outputs_reach_the_provider_as_their_views(
    monkeypatch, dtype, shape
):
    """Softmax, renorm and the top-k mask build their output views from the allocation
    (_views.matrix_view) instead of asking the tensors: the views must be the ones view()
    would give, and the softmax's workspace must lie after the probabilities in their
    buffer."""
    recorded = {}

    class Kernels:
        def renorm(self, input, out, *rest):
            recorded["renorm"] = out

        def top_k_mask(self, logits, out, *rest):
            recorded["top_k_mask"] = out

        def softmax(self, logits, probs, temperature, scalar, workspace, *rest):
            recorded["softmax"] = (probs, workspace)

    class Provider:
        capability = (9, 0)
        kernels = Kernels()

    monkeypatch.setattr(_views, "check_device_supported", lambda name, t: None)
    monkeypatch.setattr(_views, "stream_handle", lambda device: 0)
    monkeypatch.setattr(_sampling_ops, "kernels_for", lambda device: Provider.kernels)
    monkeypatch.setattr(_sampling_ops, "provider_for", lambda device: Provider)
    x = torch.empty(*shape, device="meta", dtype=dtype)
    probs = torch.empty(*shape, device="meta")
    out = aotinfer.top_k_renorm_probs(probs, 5)
    assert recorded["renorm"] == _views.view(out)
    masked = aotinfer.top_k_mask_logits(x, 5)
    assert masked.dtype == dtype and recorded["top_k_mask"] == _views.view(masked)
    soft = aotinfer.softmax(x)
    probs_view, workspace = recorded["softmax"]
    assert soft.shape == shape and soft.dtype == torch.float32
    assert probs_view == _views.view(soft)
    assert workspace[0] >= soft.data_ptr() + 4 * soft.numel()
    assert workspace[2] == (2 * shape[0] * -(-shape[1] // 1024),)
