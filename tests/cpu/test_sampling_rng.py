"""Randomness rules of the sampling family: how a call advances a CUDA generator (the state
arithmetic, run here on a stand-in generator), the increments per function, the CPU
generator rule, explicit seeds and offsets (ints and per-row tensors), reproducibility."""

from __future__ import annotations

import pytest
import torch

import aotinfer
from aotinfer import _rng, _sampling_ops, _views
from aotinfer.reference import sampling as ref


def state_of(seed, offset):
    return torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8)


# ----------------------------------------------------------------------------------------
# CUDA generator state arithmetic (FlashInfer's rule)


@pytest.mark.parametrize(
    "increment,advance",
    [(0, 0), (1, 4), (3, 4), (4, 4), (5, 8), (32, 32), (33, 36), (10**6 + 1, 10**6 + 4)],
)
def test_advance_state_rounds_the_increment_up_to_a_multiple_of_4(increment, advance):
    new_state, seed, offset = _rng.advance_state(state_of(123, 1000), increment)
    assert new_state.dtype == torch.uint8 and new_state.numel() == 16
    assert new_state.view(torch.int64).tolist() == [123, 1000 + advance]
    assert (seed, offset) == (123, 1000 + advance)  # the advanced offset is the one used


def test_advance_state_keeps_a_64_bit_seed_bit_for_bit():
    new_state, seed, _ = _rng.advance_state(state_of(-(2**63) + 5, 0), 4)
    assert seed == -(2**63) + 5  # the uint64 seed 2^63 + 5, as FlashInfer returns it
    assert new_state[:8].tolist() == state_of(-(2**63) + 5, 0)[:8].tolist()


def test_advance_state_rejects_other_state_sizes():
    with pytest.raises(ValueError, match="must be 16 bytes"):
        _rng.advance_state(torch.zeros(8, dtype=torch.uint8), 4)


class StandInCudaGenerator:
    """What get_seed_and_offset (its unchecked core, advance_generator) uses of a CUDA
    generator, with torch's rules: the state is [seed, offset] as int64, initial_seed() is
    the seed as uint64, set_offset() refuses offsets that are not multiples of 4."""

    device = torch.device("cuda", 0)

    def __init__(self, seed, offset):
        self.state = state_of(seed, offset)
        self.state_round_trips = 0

    def get_state(self):
        self.state_round_trips += 1
        return self.state.clone()

    def set_state(self, state):
        self.state = state.clone()

    def initial_seed(self):
        return self.state.view(torch.int64)[0].item() & (2**64 - 1)

    def get_offset(self):
        return self.state.view(torch.int64)[1].item()

    def set_offset(self, offset):
        if offset % 4:
            raise RuntimeError("offset must be a multiple of 4")
        self.state = state_of(self.state.view(torch.int64)[0].item(), offset)


def test_get_seed_and_offset_advances_a_cuda_generator():
    g = StandInCudaGenerator(77, 8)
    assert _rng.advance_generator(10, g) == (77, 20)
    assert _rng.advance_generator(1, g) == (77, 24)
    assert g.state.view(torch.int64).tolist() == [77, 24]
    assert g.state_round_trips == 0  # the offset calls, no state tensors
    assert aotinfer.sampling.get_seed_and_offset is _rng.get_seed_and_offset


def test_get_seed_and_offset_returns_a_64_bit_seed_as_signed_int64():
    g = StandInCudaGenerator(-(2**63) + 5, 0)
    assert _rng.advance_generator(4, g) == (-(2**63) + 5, 4)


def test_get_seed_and_offset_with_an_offset_not_a_multiple_of_4():
    g = StandInCudaGenerator(77, 6)  # only set_state can put it there
    assert _rng.advance_generator(1, g) == (77, 10)
    assert g.state.view(torch.int64).tolist() == [77, 10]
    assert g.state_round_trips == 1


def test_get_seed_and_offset_on_a_cpu_generator_draws_a_62_bit_seed():
    g = torch.Generator().manual_seed(5)
    twin = torch.Generator().manual_seed(5)
    seed, offset = _rng.get_seed_and_offset(1000, g)
    assert offset == 0 and 0 <= seed < 2**62
    assert seed == int(torch.randint(0, 2**62, (1,), dtype=torch.int64, generator=twin))
    assert torch.equal(g.get_state(), twin.get_state())  # advanced by exactly that draw
    assert _rng.get_seed_and_offset(1000, g)[0] != seed


def test_get_seed_and_offset_default_cpu_generator():
    torch.manual_seed(3)
    a = _rng.get_seed_and_offset(4, device="cpu")
    torch.manual_seed(3)
    assert _rng.get_seed_and_offset(4, None, torch.device("cpu")) == a


def test_default_generator_of_a_device_with_an_index_is_looked_up_once(monkeypatch):
    """A device with an index (what a tensor's device is) is cached by the device; one
    that cannot be served is refused by name and not cached."""
    monkeypatch.setattr(_rng, "_defaults_by_device", {})
    cpu0 = torch.device("cpu", 0)
    assert _rng.default_generator(cpu0) is torch.default_generator
    assert _rng._defaults_by_device == {cpu0: torch.default_generator}

    def not_again(device):
        raise AssertionError(f"{device} looked up again")

    with monkeypatch.context() as m:
        m.setattr(_rng, "_default_generator", not_again)
        assert _rng.default_generator(cpu0) is torch.default_generator
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device is cuda:0, but this torch sees no CUDA"):
            _rng.default_generator(torch.device("cuda", 0))
        assert list(_rng._defaults_by_device) == [cpu0]


def test_default_generator_of_a_cuda_device(monkeypatch):
    """By index, the current device's without one; an index past the devices torch sees
    is refused by name (torch's own IndexError before). Two stand-in devices here."""
    gens = (torch.Generator(), torch.Generator())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "default_generators", gens)
    assert _rng._default_generator("cuda:0") is gens[0]
    assert _rng._default_generator(0) is gens[0]
    assert _rng._default_generator(None) is gens[1]
    assert _rng._default_generator(torch.device("cuda")) is gens[1]
    with pytest.raises(
        ValueError, match=r"device is cuda:2, but this torch sees 2 CUDA device\(s\)"
    ):
        _rng._default_generator(torch.device("cuda", 2))


def test_a_cuda_generator_is_neither_read_nor_advanced_during_graph_capture(monkeypatch):
    monkeypatch.setattr(_views, "stream_capturing", lambda: True)
    g = StandInCudaGenerator(77, 8)
    with pytest.raises(
        ValueError,
        match=r"seed, offset: a CUDA generator cannot be read or advanced during CUDA graph "
        r"capture; pass seed and offset as int64 tensors",
    ):
        _rng.advance_generator(4, g)
    assert g.state.view(torch.int64).tolist() == [77, 8]
    # A CPU generator has no capture to fear.
    assert _rng.advance_generator(4, torch.Generator().manual_seed(1))[1] == 0


def test_stream_capturing_falls_back_to_torch_and_means_no_where_it_cannot_ask(monkeypatch):
    """Without torch's raw query it asks torch.cuda.is_current_stream_capturing; where
    that cannot answer (a torch without CUDA: RuntimeError or AssertionError) nothing is
    being captured."""
    monkeypatch.setattr(_views, "_raw_capturing", None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _views.stream_capturing() is True
    for exc in (RuntimeError("no CUDA"), AssertionError("Torch not compiled with CUDA")):

        def fails(exc=exc):
            raise exc

        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", fails)
        assert _views.stream_capturing() is False


# ----------------------------------------------------------------------------------------
# Increments per call


def _record_increments(monkeypatch):
    calls = []

    def fake(increment, generator=None, device=None):
        calls.append(increment)
        return 11, 0

    monkeypatch.setattr(_rng, "advance_generator", fake)
    return calls


def test_increments_per_function(monkeypatch):
    calls = _record_increments(monkeypatch)
    probs = torch.softmax(torch.randn(3, 50), -1)
    logits = torch.randn(3, 50)
    idx = torch.tensor([0, 0, 1, 2, 2])  # batch 5
    cases = [
        (lambda: aotinfer.sampling_from_logits(logits, idx), 5 * 50),
        (lambda: aotinfer.sampling_from_probs(probs, idx), 5),
        (lambda: aotinfer.top_p_sampling_from_probs(probs, 0.5, idx), 5 * 32),
        (lambda: aotinfer.top_k_sampling_from_probs(probs, 3, idx), 5 * 32),
        (lambda: aotinfer.min_p_sampling_from_probs(probs, 0.5, idx), 5),
        (lambda: aotinfer.top_k_top_p_sampling_from_probs(probs, 3, 0.5, idx), 5 * 32),
        (lambda: aotinfer.top_k_top_p_sampling_from_probs(probs, 3, 0.5, idx, "joint"), 5 * 32),
        (lambda: aotinfer.top_k_top_p_sampling_from_logits(logits, 3, 0.5, idx), 5 * 32),
        (lambda: aotinfer.top_k_top_p_sampling_from_logits(logits, 3, 0.5, idx, "joint"), 5 * 32),
        (lambda: aotinfer.sampling_from_probs(probs), 3),
    ]
    for run, increment in cases:
        calls.clear()
        run()
        assert calls == [increment]
    calls.clear()
    draft = torch.softmax(torch.randn(4, 3, 10), -1)
    target = torch.softmax(torch.randn(4, 4, 10), -1)
    aotinfer.chain_speculative_sampling(draft, torch.zeros(4, 3, dtype=torch.int64), target)
    assert calls == [4 * (3 + 1)]


def test_explicit_seed_and_offset_do_not_touch_the_generator(monkeypatch):
    calls = _record_increments(monkeypatch)
    probs = torch.softmax(torch.randn(3, 50), -1)
    aotinfer.sampling_from_probs(probs, seed=1, offset=2)
    aotinfer.sampling_from_probs(probs, seed=torch.tensor([1]), offset=torch.tensor([2]))
    assert calls == []
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    aotinfer.top_p_sampling_from_probs(probs, 0.5, generator=g, seed=1, offset=2)
    assert torch.equal(g.get_state(), before)


def test_increment_formula():
    f = _sampling_ops.increment_for
    assert f(True, 0, 7, 100) == 700
    assert [f(False, m, 7, 100) for m in range(6)] == [7, 224, 224, 7, 224, 224]


# ----------------------------------------------------------------------------------------
# Reproducibility


def _probs(rows=64, vocab=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g) * 2, dim=-1)


SAMPLERS = {
    "probs": lambda p, **kw: aotinfer.sampling_from_probs(p, **kw),
    "top_p": lambda p, **kw: aotinfer.top_p_sampling_from_probs(p, 0.9, **kw),
    "top_k": lambda p, **kw: aotinfer.top_k_sampling_from_probs(p, 50, **kw),
    "min_p": lambda p, **kw: aotinfer.min_p_sampling_from_probs(p, 0.05, **kw),
    "top_k_top_p": lambda p, **kw: aotinfer.top_k_top_p_sampling_from_probs(p, 50, 0.9, **kw),
    "logits": lambda p, **kw: aotinfer.sampling_from_logits(p.log(), **kw),
    "logits_top_k_top_p": lambda p, **kw: aotinfer.top_k_top_p_sampling_from_logits(
        p.log(), 50, 0.9, **kw
    ),
}


@pytest.mark.parametrize("fn", SAMPLERS.values(), ids=list(SAMPLERS))
def test_same_generator_state_gives_the_same_tokens(fn):
    probs = _probs()
    g = torch.Generator().manual_seed(42)
    a = fn(probs, generator=g)
    b = fn(probs, generator=g)  # the generator moved on
    g.manual_seed(42)
    assert torch.equal(fn(probs, generator=g), a)
    assert (a != b).float().mean() > 0.5
    torch.manual_seed(7)
    c = fn(probs)
    torch.manual_seed(7)
    assert torch.equal(fn(probs), c)


@pytest.mark.parametrize("fn", SAMPLERS.values(), ids=list(SAMPLERS))
def test_explicit_seeds_and_offsets(fn):
    probs = _probs()
    a = fn(probs, seed=1234, offset=8)
    assert torch.equal(fn(probs, seed=1234, offset=8), a)
    assert (fn(probs, seed=1235, offset=8) != a).float().mean() > 0.5  # different seed
    assert (fn(probs, seed=1234, offset=12) != a).float().mean() > 0.5  # different offset
    one = torch.tensor([1234], dtype=torch.int64)
    assert torch.equal(fn(probs, seed=one, offset=torch.tensor([8])), a)  # length-1 tensors


@pytest.mark.parametrize("fn", SAMPLERS.values(), ids=list(SAMPLERS))
def test_per_row_seeds_and_offsets_are_honoured_row_by_row(fn):
    probs = _probs(rows=8)
    seeds = torch.tensor([5, 6, 7, 8, 9, 10, 11, 2**63 - 1], dtype=torch.int64)
    offsets = torch.tensor([0, 4, 8, 0, 4, 2**40, 0, 12], dtype=torch.int64)
    got = fn(probs, seed=seeds, offset=offsets)
    for b in range(8):
        alone = fn(probs, seed=int(seeds[b]), offset=int(offsets[b]))
        assert got[b] == alone[b], f"row {b}"
    # Mixed: per-row seeds with one broadcast offset.
    got = fn(probs, seed=seeds, offset=torch.tensor([4]))
    for b in (0, 7):
        assert got[b] == fn(probs, seed=int(seeds[b]), offset=4)[b]


def test_uint64_seed_tensors_and_large_int_seeds_agree():
    if not hasattr(torch, "uint64"):
        pytest.skip("this torch has no uint64")
    probs = _probs(rows=4)
    bits = torch.tensor([-1, -(2**63), 3, 4], dtype=torch.int64)
    a = aotinfer.sampling_from_probs(
        probs, seed=bits.view(torch.uint64), offset=bits.view(torch.uint64)
    )
    b = aotinfer.sampling_from_probs(probs, seed=bits, offset=bits)
    assert torch.equal(a, b)
    c = aotinfer.sampling_from_probs(probs, seed=2**64 - 1, offset=2**64 - 1)
    assert c[0] == a[0]


def test_outputs_sharing_a_row_draw_independently():
    probs = torch.full((1, 1000), 1e-3)
    s = aotinfer.sampling_from_probs(probs, torch.zeros(64, dtype=torch.int64), seed=1, offset=0)
    assert s.unique().numel() > 55


def test_cpu_path_uses_the_drawn_seed_with_offset_zero():
    probs = _probs(rows=16)
    g = torch.Generator().manual_seed(99)
    twin = torch.Generator().manual_seed(99)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64, generator=twin))
    got = aotinfer.top_k_sampling_from_probs(probs, 20, generator=g)
    want = ref.sample_from_probs(probs, None, 1, 20, seed=seed, offset=0)[0]
    assert torch.equal(got.long(), want)


@pytest.mark.parametrize(
    "increment, generator, message",
    [
        (-1, None, "increment must be an int >= 0, got -1"),
        ("x", None, "increment must be an int >= 0, got 'x'"),
        (2.0, None, "increment must be an int >= 0, got 2.0"),
        (True, None, "increment must be an int >= 0, got True"),
        (4, 5, "generator must be a torch.Generator or None, got int"),
    ],
)
def test_get_seed_and_offset_checks_its_arguments(increment, generator, message):
    with pytest.raises(ValueError) as e:
        aotinfer.sampling.get_seed_and_offset(increment, generator, device="cpu")
    assert str(e.value) == message
