"""Every validation message of the sampling family: ValueError naming the argument, what
was expected and what was given, raised in the core before anything runs (FlashInfer's
texts where API.md has them)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import aotinfer
from aotinfer import _sampling_checks, _views

PROBS = torch.softmax(torch.randn(4, 32), dim=-1)
LOGITS = torch.randn(4, 32)

PROB_SAMPLERS = {
    "sampling_from_probs": lambda p, **kw: aotinfer.sampling_from_probs(p, **kw),
    "top_p": lambda p, **kw: aotinfer.top_p_sampling_from_probs(p, 0.5, **kw),
    "top_k": lambda p, **kw: aotinfer.top_k_sampling_from_probs(p, 3, **kw),
    "min_p": lambda p, **kw: aotinfer.min_p_sampling_from_probs(p, 0.5, **kw),
    "top_k_top_p": lambda p, **kw: aotinfer.top_k_top_p_sampling_from_probs(p, 3, 0.5, **kw),
}
LOGIT_SAMPLERS = {
    "sampling_from_logits": lambda x, **kw: aotinfer.sampling_from_logits(x, **kw),
    "top_k_top_p_from_logits": lambda x, **kw: aotinfer.top_k_top_p_sampling_from_logits(
        x, 3, 0.5, **kw
    ),
}
ALL_SAMPLERS = [(n, f, PROBS) for n, f in PROB_SAMPLERS.items()] + [
    (n, f, LOGITS) for n, f in LOGIT_SAMPLERS.items()
]
SAMPLER_IDS = [s[0] for s in ALL_SAMPLERS]


def raises(text):
    return pytest.raises(ValueError, match=re.escape(text))


# ----------------------------------------------------------------------------------------
# The input matrix


@pytest.mark.parametrize("name,fn,x", ALL_SAMPLERS, ids=SAMPLER_IDS)
def test_input_rank_dtype_device_and_vocab(name, fn, x):
    arg = "probs" if x is PROBS else "logits"
    with raises(f"{arg} must be a 2-D tensor, got 1-D with shape (32,)"):
        fn(x[0])
    with raises(f"{arg} must be a 2-D tensor, got 3-D"):
        fn(x.unsqueeze(0))
    with raises(f"{arg} must be a torch.Tensor, got list"):
        fn(x.tolist())
    with raises(f"{arg} must be a floating-point tensor"):
        fn(torch.ones(4, 32, dtype=torch.int32))
    with raises(f"{arg} must be a CUDA or CPU tensor, got device meta"):
        fn(torch.empty(4, 32, device="meta"))
    with raises(f"{arg} must have a non-empty last (vocabulary) dimension"):
        fn(torch.empty(4, 0))


@pytest.mark.parametrize("fn", [aotinfer.top_k_renorm_probs, aotinfer.top_k_mask_logits])
def test_renorm_and_mask_dtypes(fn):
    arg = "probs" if fn is aotinfer.top_k_renorm_probs else "logits"
    with raises(f"{arg}: Unsupported dtype float64, expected float32, float16, or bfloat16"):
        fn(PROBS.double(), 3)
    with pytest.raises(AssertionError, match="Unsupported dtype"):  # FlashInfer's type, too
        fn(PROBS.double(), 3)
    with raises(f"{arg} must be a 2-D tensor"):
        fn(PROBS[0], 3)


def test_a_strided_vocabulary_is_read_as_its_contiguous_copy():
    wide = torch.softmax(torch.randn(4, 64), dim=-1)
    for strided in (wide[:, ::2], torch.softmax(torch.randn(32, 4), dim=0).t()):
        assert strided.dtype == torch.float32 and strided.stride(-1) != 1
        same = strided.contiguous()
        for fn in (
            lambda p: aotinfer.top_k_sampling_from_probs(p, 5, seed=3, offset=4),
            lambda p: aotinfer.top_p_renorm_probs(p, 0.5),
            lambda p: aotinfer.top_k(p, 3)[1],
        ):
            assert torch.equal(fn(strided), fn(same))


def test_top_p_renorm_input():
    with raises("probs must be a 2-D tensor"):
        aotinfer.top_p_renorm_probs(PROBS[0], 0.5)
    with raises("probs must be a floating-point tensor"):
        aotinfer.top_p_renorm_probs(PROBS.int(), 0.5)
    assert aotinfer.top_p_renorm_probs(PROBS.double(), 0.5).dtype == torch.float32


# ----------------------------------------------------------------------------------------
# indices


@pytest.mark.parametrize("name,fn,x", ALL_SAMPLERS, ids=SAMPLER_IDS)
def test_indices(name, fn, x):
    with raises("indices must have dtype int32, int64, got float32"):
        fn(x, indices=torch.zeros(3))
    with raises("indices must be a 1-D tensor, got 2-D"):
        fn(x, indices=torch.zeros(3, 1, dtype=torch.int64))
    with raises("indices must be on cpu, like the input, got meta"):
        fn(x, indices=torch.zeros(3, dtype=torch.int64, device="meta"))
    with raises("indices must be a torch.Tensor, got list"):
        fn(x, indices=[0, 1])


def test_no_indices_means_one_output_per_row():
    out = aotinfer.sampling_from_probs(PROBS, None, seed=1, offset=2)
    assert out.shape == (4,) and out.dtype == torch.int32
    # (The samplers skip the check for None; the check itself passes None through.)
    assert _sampling_checks.indices_arg(None, 4, torch.device("cpu")) is None


def test_indices_into_an_empty_input():
    with raises("indices has 2 entries but the input has no rows"):
        aotinfer.sampling_from_probs(torch.empty(0, 8), torch.zeros(2, dtype=torch.int64))


# ----------------------------------------------------------------------------------------
# Per-row parameters

TOP_K_USERS = {
    "top_k_sampling": lambda k: aotinfer.top_k_sampling_from_probs(PROBS, k),
    "top_k_top_p_probs": lambda k: aotinfer.top_k_top_p_sampling_from_probs(PROBS, k, 0.5),
    "top_k_top_p_logits": lambda k: aotinfer.top_k_top_p_sampling_from_logits(LOGITS, k, 0.5),
    "top_k_renorm": lambda k: aotinfer.top_k_renorm_probs(PROBS, k),
    "top_k_mask": lambda k: aotinfer.top_k_mask_logits(LOGITS, k),
}
TOP_P_USERS = {
    "top_p_sampling": lambda p: aotinfer.top_p_sampling_from_probs(PROBS, p),
    "top_k_top_p_probs": lambda p: aotinfer.top_k_top_p_sampling_from_probs(PROBS, 3, p),
    "top_k_top_p_logits": lambda p: aotinfer.top_k_top_p_sampling_from_logits(LOGITS, 3, p),
    "top_p_renorm": lambda p: aotinfer.top_p_renorm_probs(PROBS, p),
}
MIN_P_USERS = {"min_p_sampling": lambda p: aotinfer.min_p_sampling_from_probs(PROBS, p)}


@pytest.mark.parametrize("use", TOP_K_USERS.values(), ids=list(TOP_K_USERS))
def test_top_k(use):
    with raises("top_k must be >= 1, got 0"):
        use(0)
    with raises("top_k must be >= 1, got -2"):
        use(-2)
    with raises("top_k must be an int >= 1 or a 1-D integer tensor, got 1.5 (float)"):
        use(1.5)
    with raises("top_k must be an int >= 1 or a 1-D integer tensor, got True (bool)"):
        use(True)
    with raises("top_k tensor must have an integer dtype (int32 or int64), got float32"):
        use(torch.ones(4))
    _per_row_tensor_errors("top_k", use, torch.ones(4, dtype=torch.int64))
    # k >= vocab is allowed (no filter), as are per-row values that mean "no filter".
    use(10**12)
    use(torch.tensor([0, -1, 32, 99], dtype=torch.int32))


def test_numpy_integers_mean_what_the_ints_mean():
    """top_k, seed and offset as numpy integers (numbers.Integral, not int: the checked
    path rather than the fast one)."""
    kw = dict(seed=5, offset=8)
    assert torch.equal(
        aotinfer.top_k_sampling_from_probs(PROBS, np.int64(3), **kw),
        aotinfer.top_k_sampling_from_probs(PROBS, 3, **kw),
    )
    assert torch.equal(
        aotinfer.top_k_renorm_probs(PROBS, np.int32(3)), aotinfer.top_k_renorm_probs(PROBS, 3)
    )
    with raises("top_k must be >= 1, got 0"):
        aotinfer.top_k_mask_logits(LOGITS, np.int64(0))
    got = aotinfer.sampling_from_probs(PROBS, seed=np.int64(5), offset=np.uint64(8))
    assert torch.equal(got, aotinfer.sampling_from_probs(PROBS, **kw))
    top = aotinfer.sampling_from_probs(PROBS, seed=np.uint64(2**64 - 1), offset=np.int8(0))
    assert torch.equal(top, aotinfer.sampling_from_probs(PROBS, seed=-1, offset=0))  # mod 2^64
    eight = np.float64(8)
    with raises(f"offset must be an int or a 1-D int64/uint64 tensor, got {eight!r} (float64)"):
        aotinfer.sampling_from_probs(PROBS, seed=np.int64(5), offset=eight)


WIDE_K = {  # values past int32 that a wrapping cast would turn into small k
    "int64": [2**32 + 1, -(2**32) + 2, 2, 1],
    "uint32": [2**32 - 1, 2**31 + 1, 2, 1],
    "uint64": [2**63 + 1, 2**32 + 2, 2, 1],
}


@pytest.mark.parametrize("dtype_name", list(WIDE_K))
def test_wide_per_row_top_k_saturates_instead_of_wrapping(dtype_name):
    """A wrapping int32 cast turned k = 2**32 + 1 into top-1 and -(2**32) + 2 into top-2;
    both mean no filter (k >= V, k < 1), as 2**32 + 1 does as a Python int."""
    dtype = getattr(torch, dtype_name, None)
    if dtype is None:
        pytest.skip(f"this torch has no {dtype_name}")
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1]] * 4)
    k = torch.tensor(WIDE_K[dtype_name], dtype=dtype)
    got = aotinfer.top_k_renorm_probs(p, k)
    assert torch.equal(got[:2], p[:2])  # no filter
    assert torch.equal(got[2:], aotinfer.top_k_renorm_probs(p[2:], torch.tensor([2, 1])))
    masked = aotinfer.top_k_mask_logits(p.log(), k)
    assert torch.isfinite(masked[:2]).all() and int(torch.isfinite(masked[3]).sum()) == 1


@pytest.mark.parametrize(
    "name,use",
    [*(("top_p", u) for u in TOP_P_USERS.values()), *(("min_p", u) for u in MIN_P_USERS.values())],
    ids=[*TOP_P_USERS, *MIN_P_USERS],
)
def test_probability_parameters(name, use):
    for bad in (0, 0.0, -0.1, 1.0001, 2, float("nan"), float("inf")):
        with raises(f"{name} must be in (0, 1], got {bad!r}"):
            use(bad)
    with raises(f"{name} must be a float in (0, 1] or a 1-D float tensor, got '0.5' (str)"):
        use("0.5")
    with raises(f"{name} must be a float in (0, 1] or a 1-D float tensor, got True (bool)"):
        use(True)
    with raises(f"{name} tensor must have a floating-point dtype (float32), got int64"):
        use(torch.ones(4, dtype=torch.int64))
    _per_row_tensor_errors(name, use, torch.full((4,), 0.5))
    use(1)  # int 1 is 1.0
    use(1.0)


def _per_row_tensor_errors(name, use, good):
    with raises(
        f"{name}: Expected a 1D tensor of shape (batch_size,) or scalar for the sampling "
        "parameter, but got a 0-dimensional tensor."
    ):
        use(good[0])
    with raises(
        f"{name}: Expected a 1D tensor or scalar for the sampling parameter, but got a 2D tensor."
    ):
        use(good.reshape(2, 2))
    with raises(
        f"{name}: Sampling parameter tensor batch size mismatch: expected length 4 to match "
        "the reference tensor batch size, but got length 3."
    ):
        use(good[:3])
    with raises(f"{name} must be on cpu, like the input, got meta"):
        use(good.to("meta"))
    use(good)


def test_per_row_length_is_the_number_of_source_rows_not_the_batch():
    idx = torch.tensor([0, 0, 1, 2, 3, 3, 3])  # batch 7 from 4 rows
    aotinfer.top_p_sampling_from_probs(PROBS, torch.full((4,), 0.5), idx)
    with raises("expected length 4 to match the reference tensor batch size, but got length 7"):
        aotinfer.top_p_sampling_from_probs(PROBS, torch.full((7,), 0.5), idx)


def test_filter_apply_order():
    valid = "; expected one of 'top_k_first', 'joint'"
    with raises("Invalid filter_apply_order: top_p_first" + valid):
        aotinfer.top_k_top_p_sampling_from_probs(PROBS, 3, 0.5, filter_apply_order="top_p_first")
    with raises("Invalid filter_apply_order: None" + valid):
        aotinfer.top_k_top_p_sampling_from_logits(LOGITS, 3, 0.5, filter_apply_order=None)
    with raises("Invalid filter_apply_order: ['joint' 'joint']" + valid):  # (not NumPy's ==)
        aotinfer.top_k_top_p_sampling_from_probs(
            PROBS, 3, 0.5, filter_apply_order=np.array(["joint", "joint"])
        )


def test_softmax_temperature():
    # Out of range: 1 / temperature would not be a normal float32 (NaN rows, not one-hot).
    for bad in (0, -1.0, float("inf"), float("nan"), 1e-40, 2.0**-127, 1e39, 2.0**127):
        with raises(
            "temperature must be in [2**-126, 2**126] (positive, its reciprocal a normal "
            f"float32: the kernels scale by 1 / temperature), got {bad!r}"
        ):
            aotinfer.softmax(LOGITS, bad)
    for bad in (True, "0.7", [0.7]):
        with raises("temperature must be a positive float or a 1-D float tensor, got"):
            aotinfer.softmax(LOGITS, bad)
    # Edges and numpy scalars are accepted, as for top_p / top_k.
    ref = aotinfer.softmax(LOGITS, 0.7)
    assert torch.equal(aotinfer.softmax(LOGITS, np.float32(0.7)), ref)
    assert torch.equal(aotinfer.softmax(LOGITS, np.int64(2)), aotinfer.softmax(LOGITS, 2.0))
    small = torch.linspace(-1, 1, 50).expand(2, 50)  # |x| / 2**-126 stays finite
    for edge in (2.0**-126, 2.0**126):
        assert not torch.isnan(aotinfer.softmax(small, edge)).any()
    with raises("temperature must have length 4 (one per row), got length 3"):
        aotinfer.softmax(LOGITS, torch.ones(3))
    with raises("temperature must be on cpu, like the input, got meta"):
        aotinfer.softmax(LOGITS, torch.ones(4, device="meta"))


# ----------------------------------------------------------------------------------------
# seed / offset / generator


@pytest.mark.parametrize("name,fn,x", ALL_SAMPLERS, ids=SAMPLER_IDS)
def test_seed_and_offset(name, fn, x):
    i64 = torch.zeros(4, dtype=torch.int64)
    with raises("seed and offset must both be tensors or both be scalars"):
        fn(x, seed=i64, offset=0)
    with raises("seed and offset must both be tensors or both be scalars"):
        fn(x, seed=1, offset=i64)
    with raises(
        "seed and offset must be given together (or both left None to use the generator); "
        "got seed alone"
    ):
        fn(x, seed=1)
    with raises("got offset alone"):
        fn(x, offset=i64)
    with raises("seed tensor must be int64/uint64, got int32"):
        fn(x, seed=i64.int(), offset=i64)
    with raises("offset tensor must be int64/uint64, got float32"):
        fn(x, seed=i64, offset=i64.float())
    with raises("seed tensor must be 1D, got 2-D of shape (2, 2)"):
        fn(x, seed=i64.reshape(2, 2), offset=i64)
    with raises("offset tensor must be 1D, got 0-D of shape ()"):
        fn(x, seed=i64, offset=i64[0])
    with raises("seed tensor length must be 1 or 4, got 3"):
        fn(x, seed=i64[:3], offset=i64)
    with raises("offset tensor length must be 1 or 4, got 5"):
        fn(x, seed=i64, offset=torch.zeros(5, dtype=torch.int64))
    with raises("seed tensor must be on cpu, got meta"):
        fn(x, seed=i64.to("meta"), offset=i64)
    with raises("offset tensor must be on cpu, got meta"):
        fn(x, seed=i64, offset=i64.to("meta"))
    with raises("seed must be an int or a 1-D int64/uint64 tensor, got 1.0 (float)"):
        fn(x, seed=1.0, offset=0)
    with raises("offset must be an int or a 1-D int64/uint64 tensor, got '3' (str)"):
        fn(x, seed=1, offset="3")
    fn(x, seed=i64[:1], offset=i64)  # length 1 broadcasts
    fn(x, seed=-5, offset=2**64 + 7)  # any int, mod 2^64


def test_seed_length_follows_the_batch_with_indices():
    idx = torch.tensor([0, 1, 1, 2, 3, 3])
    with raises("seed tensor length must be 1 or 6"):
        aotinfer.sampling_from_probs(
            PROBS,
            idx,
            seed=torch.zeros(4, dtype=torch.int64),
            offset=torch.zeros(1, dtype=torch.int64),
        )


@pytest.mark.parametrize("name,fn,x", ALL_SAMPLERS, ids=SAMPLER_IDS)
def test_generator(name, fn, x):
    with raises("generator must be a torch.Generator or None, got 42 (int)"):
        fn(x, generator=42)
    with raises("generator must be a torch.Generator or None, got a 0-D int64 tensor"):
        fn(x, generator=torch.tensor(42))
    fn(x, generator=torch.Generator().manual_seed(1))


def test_generator_device_must_match():
    class FakeCudaGenerator(torch.Generator):
        @property
        def device(self):
            return torch.device("cuda", 0)

    with raises("generator must be a generator of cpu, like the input, got one of cuda:0"):
        _sampling_checks.generator_arg(FakeCudaGenerator(), torch.device("cpu"))
    ok = _sampling_checks.generator_arg
    assert ok(None, torch.device("cpu")) is None


# ----------------------------------------------------------------------------------------
# chain_speculative_sampling and top_k


def _chain():
    draft = torch.softmax(torch.randn(2, 3, 10), -1)
    target = torch.softmax(torch.randn(2, 4, 10), -1)
    return draft, torch.zeros(2, 3, dtype=torch.int64), target


def test_chain_speculative_validation(monkeypatch):
    d, ids, t = _chain()
    f = aotinfer.chain_speculative_sampling
    with raises("draft_probs must be a 3-D tensor, got 2-D"):
        f(d[0], ids, t)
    with raises("target_probs must be a 3-D tensor"):
        f(d, ids, t[0])
    with raises(
        "target_probs must have shape (batch_size, n + 1, vocab_size) = (2, 4, 10) to "
        "match draft_probs (2, 3, 10), got (2, 3, 10)"
    ):
        f(d, ids, t[:, :3])
    with raises("got (2, 4, 11)"):
        f(d, ids, torch.zeros(2, 4, 11))
    with raises("draft_token_ids must have dtype int32, int64, got float32"):
        f(d, ids.float(), t)
    with raises("draft_token_ids must have shape (batch_size, n) = (2, 3), got (2, 2)"):
        f(d, ids[:, :2], t)
    with raises("draft_probs must be a floating-point tensor"):
        f(d.int(), ids, t)
    with raises("maybe_output_accepted_token_num must have dtype int32, got int64"):
        f(d, ids, t, torch.zeros(2, dtype=torch.int64))
    with raises("maybe_output_emitted_draft_token_num must have shape (2,), got (3,)"):
        f(d, ids, t, None, torch.zeros(3, dtype=torch.int32))
    with raises("maybe_output_accepted_token_num must be a 1-D tensor"):
        f(d, ids, t, torch.zeros(2, 1, dtype=torch.int32))
    with raises("maybe_output_emitted_draft_token_num must be contiguous"):
        f(d, ids, t, None, torch.zeros(4, dtype=torch.int32)[::2])
    with raises("seed and offset must both be tensors or both be scalars"):
        f(d, ids, t, seed=torch.zeros(2, dtype=torch.int64), offset=0)
    with raises("seed tensor length must be 1 or 2"):
        f(
            d,
            ids,
            t,
            seed=torch.zeros(3, dtype=torch.int64),
            offset=torch.zeros(1, dtype=torch.int64),
        )
    with raises("draft_token_ids must be on cpu, like draft_probs, got meta"):
        f(d, ids.to("meta"), t)
    with raises("target_probs must be a CUDA or CPU tensor, got device meta"):
        f(d, ids, t.to("meta"))
    # One buffer for both counters would get both sums in each.
    counters = torch.zeros(3, dtype=torch.int32)
    for accepted, emitted in ((counters[:2], counters[:2]), (counters[:2], counters[1:])):
        with raises(
            "maybe_output_accepted_token_num and maybe_output_emitted_draft_token_num must be "
            "separate tensors (both are added to in place), got overlapping ones"
        ):
            f(d, ids, t, accepted, emitted, seed=1, offset=0)
    both = torch.zeros(4, dtype=torch.int32)
    f(d, ids, t, both[:2], both[2:], seed=1, offset=0)  # adjacent, not overlapping
    # A counter in an input's memory would be added to while the kernel reads it.
    buf = torch.zeros(8, dtype=torch.int32)
    draft_ids = buf[:6].view(2, 3)
    draft_ids.copy_(ids)
    with raises(
        "maybe_output_accepted_token_num must not share memory with draft_token_ids (it is "
        "added to in place while the inputs are read)"
    ):
        f(d, draft_ids, t, buf[4:6], None, seed=1, offset=0)
    assert torch.equal(draft_ids, ids.to(torch.int32))  # refused before anything was added
    f(d, draft_ids, t, buf[6:8], None, seed=1, offset=0)  # the same buffer, apart
    # target_probs on another device than draft_probs (cuda:1 beside cuda:0 on a GPU host;
    # meta here, let through the CUDA-or-CPU check)
    monkeypatch.setattr(_views, "check_device_supported", lambda name, t: None)
    with raises("target_probs must be on cpu, like draft_probs, got meta"):
        f(d, ids, t.to("meta"))


def test_top_k_validation():
    with raises("k must be in [1, 32] (the row length), got 0"):
        aotinfer.top_k(LOGITS, 0)
    with raises("k must be in [1, 32] (the row length), got 33"):
        aotinfer.top_k(LOGITS, 33)
    with raises("k must be an int in [1, 32], got 2.0"):
        aotinfer.top_k(LOGITS, 2.0)
    with raises("input: Unsupported dtype int64, expected float32, float16, or bfloat16"):
        aotinfer.top_k(LOGITS.long(), 2)
    with raises("input must be a 2-D tensor"):
        aotinfer.top_k(LOGITS[0], 2)
    assert aotinfer.top_k(LOGITS, 32)[0].shape == (4, 32)
    for bad in (3, -1, True, 1.0, "large", [1], {}):
        with raises(f"tie_break must be TopKTieBreak.NONE, SMALL or LARGE (0, 1, 2), got {bad!r}"):
            aotinfer.top_k(LOGITS, 2, tie_break=bad)


@pytest.mark.parametrize("sorted_", [False, True])
def test_top_k_tie_break(sorted_):
    """NONE and SMALL keep the smaller indices of a tie at the k-th value, LARGE the larger
    ones; FlashInfer's enum values and names; dsa_graph_safe is accepted."""
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0], [5.0, 4.0, 4.0, 4.0, 4.0, -1.0]])
    tb = aotinfer.TopKTieBreak
    assert [int(t) for t in tb] == [0, 1, 2] and str(tb.LARGE) == "large"
    assert aotinfer.topk.TopKTieBreak is tb
    for mode in (tb.NONE, tb.SMALL, 0, 1):
        values, idx = aotinfer.top_k(x, 2, sorted=sorted_, tie_break=mode, dsa_graph_safe=True)
        assert idx.tolist() == [[1, 2], [0, 1]] and values.tolist() == [[3, 3], [5, 4]]
    values, idx = aotinfer.top_k(x, 2, sorted=sorted_, tie_break=tb.LARGE)
    # Unsorted: ascending index order; sorted: descending value, equal values by descending
    # index (the selection runs on the reversed row).
    assert idx.tolist() == ([[4, 2], [0, 4]] if sorted_ else [[2, 4], [0, 4]])
    assert torch.equal(values, x.gather(1, idx))


# ----------------------------------------------------------------------------------------
# sparse and nested tensors; get_seed_and_offset's device (session 49)


@pytest.mark.parametrize("name,fn,x", ALL_SAMPLERS, ids=SAMPLER_IDS)
def test_bool_flags_given_tensors_of_several_elements_are_named(name, fn, x):
    """bool() of such a tensor raises torch's "ambiguous" RuntimeError, naming no argument;
    other values read as their truth value, as FlashInfer reads them. (The samplers from
    logits have no return_valid, as in FlashInfer.)"""
    two = torch.tensor([True, False])
    flags = ("check_nan", "return_valid") if name in PROB_SAMPLERS else ("check_nan",)
    for flag in flags:
        with raises(f"{flag} must be a bool, got a tensor of 2 elements with shape (2,)"):
            fn(x, **{flag: two})
        with raises(f"{flag} must be a bool, got ndarray: The truth value of an array"):
            fn(x, **{flag: np.array([True, False])})
    assert fn(x, check_nan=np.bool_(True)).shape == (4,)
    if name in PROB_SAMPLERS:
        samples, valid = fn(x, return_valid=torch.tensor(True))
        assert samples.shape == valid.shape == (4,) and bool(valid.all())
        assert isinstance(fn(x, return_valid=0), torch.Tensor)


def test_softmax_and_top_k_flags_given_tensors_of_several_elements_are_named():
    two = torch.zeros(2, 1, dtype=torch.bool)
    text = "must be a bool, got a tensor of 2 elements with shape (2, 1)"
    with raises(f"enable_pdl {text}"):
        aotinfer.softmax(LOGITS, enable_pdl=two)
    with raises(f"sorted {text}"):
        aotinfer.top_k(LOGITS, 3, sorted=two)
    values, _ = aotinfer.top_k(LOGITS, 3, sorted=torch.tensor([1]))
    assert bool((values[:, :-1] >= values[:, 1:]).all())


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_and_nested_tensors_are_refused_naming_the_argument():
    """They failed deep inside torch before ("unsupported memory format option
    Contiguous", aten::clamp not on SparseCPU, "dimension -1 is irregular")."""
    sparse = PROBS.to_sparse()
    with raises("probs must be a dense (strided) tensor, got a sparse_coo tensor"):
        aotinfer.sampling_from_probs(sparse, seed=1, offset=1)
    with raises("logits must be a dense (strided) tensor, got a sparse_csr tensor"):
        aotinfer.softmax(LOGITS.to_sparse_csr())
    with pytest.warns(UserWarning):  # torch: nested tensors are a prototype
        nested = torch.nested.nested_tensor([PROBS[0], PROBS[1, :5]])
    with raises("probs must be a dense (strided) tensor, got a nested tensor"):
        aotinfer.top_k_renorm_probs(nested, 3)
    rows = torch.tensor([1, 2, 3, 4])
    with raises("top_k must be a dense (strided) tensor, got a sparse_coo tensor"):
        aotinfer.top_k_sampling_from_probs(PROBS, rows.to_sparse(), seed=1, offset=1)
    with raises("top_p must be a dense (strided) tensor"):
        aotinfer.top_p_renorm_probs(PROBS, torch.ones(4).to_sparse())
    with raises("temperature must be a dense (strided) tensor"):
        aotinfer.softmax(LOGITS, temperature=torch.ones(4).to_sparse())
    with raises("indices must be a dense (strided) tensor"):
        aotinfer.sampling_from_probs(
            PROBS, indices=torch.tensor([0, 1]).to_sparse(), seed=1, offset=1
        )
    with raises("seed must be a dense (strided) tensor"):
        aotinfer.sampling_from_probs(
            PROBS, seed=torch.tensor([1]).to_sparse(), offset=torch.tensor([1])
        )
    with raises("input must be a dense (strided) tensor"):
        aotinfer.top_k(PROBS.to_sparse(), 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the messages of a torch without CUDA")
def test_get_seed_and_offset_refuses_a_device_it_cannot_serve():
    """Before: IndexError (an index past device_count), AssertionError (a torch without
    CUDA), or torch.device's own RuntimeError / TypeError, none naming the argument."""
    g = aotinfer.sampling.get_seed_and_offset
    for device, text in [
        ("cuda:1", "device is cuda:1, but this torch sees no CUDA device"),
        (None, "device is cuda, but this torch sees no CUDA device"),
        (0, "device is cuda:0, but this torch sees no CUDA device"),
        ("bogus", "device must be a CUDA or CPU device (torch.device, str or int), got 'bogus'"),
        (3.5, "device must be a CUDA or CPU device (torch.device, str or int), got 3.5"),
        (-1, "got -1"),
        ("meta", "device must be a CUDA or CPU device, got meta"),
    ]:
        with raises(text):
            g(4, device=device)
    assert isinstance(g(4, device="cpu")[0], int)


def test_more_rows_than_a_grid_holds_are_refused():
    """One block (or cluster) per row: 2**31 rows or indices would wrap the grid's x
    (expanded views here: no memory behind them)."""
    rows = torch.zeros(1, 4).expand(2**31, 4)
    with raises(f"probs has {2**31} rows; at most 2**31 - 1 are served"):
        aotinfer.sampling_from_probs(rows, seed=1, offset=1)
    with raises(f"logits has {2**31} rows; at most 2**31 - 1 are served"):
        aotinfer.softmax(rows)
    with raises(f"input has {2**31} rows"):
        aotinfer.top_k(rows, 2)
    many = torch.zeros(1, dtype=torch.int32).expand(2**31)
    with raises(f"indices has {2**31} entries; at most 2**31 - 1 are served"):
        aotinfer.sampling_from_probs(PROBS, indices=many, seed=1, offset=1)


def test_outputs_carry_no_gradient():
    """As on the GPU path; the CPU softmax kept torch.softmax's SoftmaxBackward0 before."""
    x = torch.randn(2, 5, requires_grad=True)
    probs = torch.softmax(x, -1)
    for out in (
        aotinfer.softmax(x),
        aotinfer.softmax(x, temperature=torch.full((2,), 0.5)),
        aotinfer.top_k_renorm_probs(probs, 2),
        aotinfer.top_p_renorm_probs(probs, 0.5),
        aotinfer.top_k_mask_logits(x, 2),
        aotinfer.top_k(x, 2)[0],
    ):
        assert not out.requires_grad and out.grad_fn is None
