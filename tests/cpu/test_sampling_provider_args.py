"""What an eager sampling call hands the provider, checked on CPU: meta tensors stand in for
CUDA tensors (they take the provider path, and allocate nothing) and a recording fake
stands in for the provider's kernel module."""

from __future__ import annotations

import ctypes
import math

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


# ----------------------------------------------------------------------------------------
# Every kernel of the family, and what the core does around it


class Recorder:
    """A provider's kernel module that records every call by kernel name."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, args))


@pytest.fixture
def kernels(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(_views, "check_device_supported", lambda name, t: None)
    monkeypatch.setattr(_views, "stream_handle", lambda device: 0)
    monkeypatch.setattr(_sampling_ops, "kernels_for", lambda device: recorder)
    return recorder


class NotCpu(torch.Tensor):
    """A CPU tensor that says it is not one: it takes the provider path with memory behind
    it (a meta tensor has none, and every meta data_ptr() is 0), so a fake kernel can read
    and write through the views it is handed."""

    @property
    def is_cpu(self):
        return False


def _memory_of(view):
    """The CPU tensor at a view's memory (a contiguous tensor, as the outputs are)."""
    ptr, code, shape, _, _ = view
    dtype = next(d for d, c in _views.DTYPE_CODES.items() if c == code)
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype).view(shape)


def test_an_empty_batch_launches_nothing(kernels):
    empty = torch.empty(0, 100, device="meta")
    samples, valid = aotinfer.top_k_sampling_from_probs(
        empty, 5, seed=1, offset=2, return_valid=True
    )
    assert (samples.shape, samples.dtype, valid.shape, valid.dtype) == (
        (0,), torch.int32, (0,), torch.bool,
    )  # fmt: skip
    no_outputs = torch.empty(0, dtype=torch.int64, device="meta")  # rows, but no outputs
    out = aotinfer.sampling_from_probs(
        torch.empty(3, 100, device="meta"), no_outputs, seed=1, offset=2
    )
    assert out.shape == (0,) and out.dtype == torch.int64
    assert aotinfer.top_k_renorm_probs(empty, 5).shape == (0, 100)
    assert aotinfer.top_p_renorm_probs(empty, 0.5).shape == (0, 100)
    masked = aotinfer.top_k_mask_logits(empty.half(), 5)
    assert masked.shape == (0, 100) and masked.dtype == torch.float16
    values, indices = aotinfer.top_k(empty.bfloat16(), 5)
    assert values.shape == indices.shape == (0, 5)
    assert values.dtype == torch.bfloat16 and indices.dtype == torch.int64
    draft = torch.empty(0, 3, 100, device="meta")
    target = torch.empty(0, 4, 100, device="meta")
    ids = torch.empty(0, 3, dtype=torch.int64, device="meta")
    out, accepted, emitted = aotinfer.chain_speculative_sampling(
        draft, ids, target, seed=1, offset=2
    )
    assert out.shape == (0, 4) and out.dtype == torch.int32
    assert accepted.shape == emitted.shape == (0,)
    assert kernels.calls == []


def test_softmax_enable_pdl_defaults_to_compute_capability_9_and_newer(kernels, monkeypatch):
    class Provider:
        capability = (8, 9)

    Provider.kernels = kernels
    monkeypatch.setattr(_sampling_ops, "provider_for", lambda device: Provider)
    logits = torch.empty(2, 50, device="meta")
    pdl = []
    for capability, enable_pdl in [
        ((8, 9), None), ((9, 0), None), ((12, 0), None), ((8, 0), True), ((10, 0), False),
        ((8, 0), 1), ((9, 0), 0),
    ]:  # fmt: skip
        Provider.capability = capability
        aotinfer.softmax(logits, enable_pdl=enable_pdl)
        name, args = kernels.calls[-1]
        assert name == "softmax"
        pdl.append(args[5])
    assert pdl == [False, True, True, True, False, True, False]


@pytest.mark.parametrize("tie_break", [aotinfer.TopKTieBreak.NONE, aotinfer.TopKTieBreak.LARGE])
@pytest.mark.parametrize("sorted_", [False, True])
def test_top_k_orders_the_kernels_selection_as_the_reference_does(kernels, sorted_, tie_break):
    """The kernel returns each row's k entries in ascending index order; sorted=True sorts
    them by value (ties by index, NaN last) in the core, and LARGE maps indices back from
    the reversed row: the results of the CPU reference, ties and NaN included."""

    def top_k_select(input, k, values, indices, stream):
        kernels.calls.append(("top_k_select", k))
        x = _memory_of(input)
        want_values, want_indices = aotinfer.reference.topk.top_k(x, k, sorted=False)
        _memory_of(values).copy_(want_values)
        _memory_of(indices).copy_(want_indices)

    kernels.top_k_select = top_k_select
    x = torch.tensor(
        [
            [1.0, 3.0, 3.0, 0.0, 3.0, 2.0, -1.0, 5.0],
            [float("nan"), 4.0, -float("inf"), 4.0, 4.0, 7.0, 4.0, float("nan")],
            [0.5, 0.25, 0.125, 0.0, -0.5, 1.0, 2.0, 2.0],
        ]
    )
    for k in (1, 3, 8):
        got = aotinfer.top_k(x.as_subclass(NotCpu), k, sorted=sorted_, tie_break=tie_break)
        want = aotinfer.top_k(x, k, sorted=sorted_, tie_break=tie_break)
        assert kernels.calls.pop() == ("top_k_select", k)
        assert torch.equal(got[1], want[1]), k
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)


def test_chain_speculative_hands_the_provider_its_counters_and_the_seed_as_uint64(kernels):
    g = torch.Generator().manual_seed(0)
    draft = torch.softmax(torch.randn(2, 3, 10, generator=g), -1).as_subclass(NotCpu)
    target = torch.softmax(torch.randn(2, 4, 10, generator=g), -1).as_subclass(NotCpu)
    ids = torch.zeros(2, 3, dtype=torch.int64)
    accepted = torch.tensor([5, 6], dtype=torch.int32)
    emitted = torch.tensor([7, 8], dtype=torch.int32)
    out, acc, emi = aotinfer.chain_speculative_sampling(
        draft, ids, target, accepted, emitted, seed=-1, offset=2**64 + 4
    )
    assert acc is accepted and emi is emitted  # added to in place by the kernel
    assert out.shape == (2, 4) and out.dtype == torch.int32
    [(name, args)] = kernels.calls
    assert name == "chain_speculative"
    assert args[:6] == tuple(_views.view(t) for t in (draft, ids, target, out, acc, emi))
    assert args[6:10] == (None, 2**64 - 1, None, 4)
    # Per-row seeds go as their views.
    kernels.calls.clear()
    seeds = torch.tensor([1, 2])
    aotinfer.chain_speculative_sampling(draft, ids, target, seed=seeds, offset=seeds[:1])
    args = kernels.calls[-1][1]
    assert args[6:10] == (_views.view(seeds), 0, _views.view(seeds[:1]), 0)


def test_stream_handle_asks_torch_for_the_current_stream(monkeypatch):
    """torch's raw query by device index where it has one; otherwise (no index, or a torch
    without the raw query) the current Stream object's handle."""
    monkeypatch.setattr(_views, "_raw_stream", lambda index: 1000 + index)
    assert _views.stream_handle(torch.device("cuda", 3)) == 1003

    class Stream:
        cuda_stream = 77

    asked = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: asked.append(device) or Stream)
    assert _views.stream_handle(torch.device("cuda")) == 77
    monkeypatch.setattr(_views, "_raw_stream", None)
    assert _views.stream_handle(torch.device("cuda", 1)) == 77
    assert asked == [torch.device("cuda"), torch.device("cuda", 1)]
