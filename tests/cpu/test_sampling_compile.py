"""torch.compile over the sampling family, on CPU tensors (the same custom ops serve CUDA).

What works here (torch 2.13, CPU): ``torch.compile(fullgraph=True)`` with the "eager",
"aot_eager" and "inductor" backends (inductor needs a C++ compiler) traces every public
function, as long as the generator is the default one (``generator=None``) or seed and
offset are explicit; compiled calls draw exactly the tokens eager calls draw from the same
generator state. An explicit ``torch.Generator`` argument cannot enter a dynamo graph: it
fails under fullgraph and costs a graph break (still correct) without it.
"""

from __future__ import annotations

import pytest
import torch
from compile_support import BACKENDS, MARKS, fresh_dynamo  # noqa: F401 (the fixture)
from torch.utils._python_dispatch import TorchDispatchMode

import aotinfer
from aotinfer import _sampling_ops

pytestmark = MARKS


def everything(logits, probs, k, p):
    """One call of every public function, in one graph."""
    return (
        aotinfer.sampling_from_probs(probs),
        aotinfer.sampling_from_logits(logits),
        aotinfer.top_p_sampling_from_probs(probs, p, return_valid=True)[0],
        aotinfer.top_k_sampling_from_probs(probs, k),
        aotinfer.min_p_sampling_from_probs(probs, 0.1),
        aotinfer.top_k_top_p_sampling_from_probs(probs, k, p),
        aotinfer.top_k_top_p_sampling_from_probs(probs, 5, 0.9, filter_apply_order="joint"),
        aotinfer.top_k_top_p_sampling_from_logits(logits, k, p),
        aotinfer.top_k_top_p_sampling_from_logits(logits, 5, 0.9, filter_apply_order="joint"),
        aotinfer.sampling_from_probs(
            probs, seed=torch.tensor([1, 2, 3, 4]), offset=torch.tensor([8])
        ),
        aotinfer.top_p_renorm_probs(probs, 0.5),
        aotinfer.top_k_renorm_probs(probs, k),
        aotinfer.top_k_mask_logits(logits, 3),
        *aotinfer.top_k(logits, 4, sorted=True),
        aotinfer.softmax(logits, 0.7),
    )


def _inputs():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 100, generator=g) * 2
    return (
        logits,
        torch.softmax(logits, -1),
        torch.tensor([1, 5, 10, 100]),
        torch.tensor([0.5, 0.9, 1.0, 0.3]),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_fullgraph_compile_of_every_function_matches_eager(backend):
    args = _inputs()
    compiled = torch.compile(everything, fullgraph=True, backend=backend)
    torch.manual_seed(1)
    got = compiled(*args)
    torch.manual_seed(1)
    want = everything(*args)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_sampler_advances_the_default_generator(backend):
    probs = _inputs()[1]

    def draw(p):
        return aotinfer.top_k_top_p_sampling_from_logits(p.log(), 20, 0.9)

    compiled = torch.compile(draw, fullgraph=True, backend=backend)
    torch.manual_seed(5)
    a, b = compiled(probs), compiled(probs)
    torch.manual_seed(5)
    assert torch.equal(draw(probs), a) and torch.equal(draw(probs), b)


def test_two_identical_calls_in_one_graph_are_not_merged():
    probs = torch.full((256, 64), 1 / 64)

    def two(p):
        return aotinfer.sampling_from_probs(p), aotinfer.sampling_from_probs(p)

    a, b = torch.compile(two, fullgraph=True, backend="aot_eager")(probs)
    assert (a != b).any()


def test_dynamic_batch():
    def draw(p, idx):
        return aotinfer.top_p_sampling_from_probs(p, 0.9, idx, seed=3, offset=0)

    compiled = torch.compile(draw, fullgraph=True, backend="aot_eager", dynamic=True)
    probs = _inputs()[1]
    for n in (3, 7, 11):
        idx = torch.arange(n) % 4
        assert torch.equal(compiled(probs, idx), draw(probs, idx))


def test_chain_speculative_under_compile_adds_to_the_counters():
    g = torch.Generator().manual_seed(2)
    draft = torch.softmax(torch.randn(3, 2, 10, generator=g), -1)
    target = torch.softmax(torch.randn(3, 3, 10, generator=g), -1)
    ids = torch.randint(0, 10, (3, 2), generator=g)

    def spec(acc, emi):
        return aotinfer.chain_speculative_sampling(draft, ids, target, acc, emi, seed=4, offset=0)

    acc, emi = torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32)
    out, _, _ = torch.compile(spec, fullgraph=True, backend="aot_eager")(acc, emi)
    want, a, e = aotinfer.chain_speculative_sampling(draft, ids, target, seed=4, offset=0)
    assert torch.equal(out, want)
    assert torch.equal(acc, a + 1) and torch.equal(emi, e + 1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_chain_speculative_advances_the_default_generator(backend):
    g = torch.Generator().manual_seed(3)
    draft = torch.softmax(torch.randn(16, 2, 50, generator=g), -1)
    target = torch.softmax(torch.randn(16, 3, 50, generator=g), -1)
    ids = torch.randint(0, 50, (16, 2), generator=g)

    def spec():
        return aotinfer.chain_speculative_sampling(draft, ids, target)

    compiled = torch.compile(spec, fullgraph=True, backend=backend)
    torch.manual_seed(9)
    got = [compiled() for _ in range(3)]
    torch.manual_seed(9)
    for a, b in zip(got, [spec() for _ in range(3)]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(got[0][0], got[1][0])  # the generator moved on


def test_chain_speculative_under_compile_refuses_one_tensor_for_both_counters():
    draft = torch.softmax(torch.randn(3, 2, 10), -1)
    target = torch.softmax(torch.randn(3, 3, 10), -1)
    ids = torch.randint(0, 10, (3, 2))

    def spec(counters):
        return aotinfer.chain_speculative_sampling(
            draft, ids, target, counters, counters, seed=4, offset=0
        )

    with pytest.raises(Exception, match="must be separate tensors"):
        torch.compile(spec, fullgraph=True, backend="aot_eager")(torch.zeros(3, dtype=torch.int32))


def test_fake_tensor_mode_and_make_fx_meet_the_ops():
    """Outside torch.compile, a dispatch mode (FakeTensorMode, make_fx) routes the public
    functions to the ops, whose fake implementations allocate only (the reference would
    need real values)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode() as mode:
        probs = mode.from_tensor(torch.softmax(torch.randn(4, 50), -1))
        tokens = aotinfer.top_p_sampling_from_probs(probs, 0.9, seed=1, offset=2)
        assert tokens.shape == (4,) and tokens.dtype == torch.int32

    def draw(p):
        return aotinfer.top_k_sampling_from_probs(p, 5, seed=1, offset=2)

    graph = make_fx(draw, tracing_mode="fake")(torch.softmax(torch.randn(4, 50), -1))
    assert "aotinfer.sample" in str(graph.graph)


def test_uncompiled_pipe_compiles_with_fullgraph():
    from aotinfer.logits_processor import LogitsPipe, Sample, TensorType, TopK

    pipe = LogitsPipe([TopK(), Sample()], compile=False, input_type=TensorType.PROBS)
    probs = torch.softmax(torch.randn(4, 50), -1)
    compiled = torch.compile(
        lambda p: pipe(p, top_k=5, seed=3, offset=0), fullgraph=True, backend="eager"
    )
    assert torch.equal(compiled(probs), pipe(probs, top_k=5, seed=3, offset=0))


def test_explicit_generator_breaks_the_graph_but_stays_correct():
    probs = _inputs()[1]

    def draw(p, g):
        return aotinfer.sampling_from_probs(p, generator=g)

    with pytest.raises(Exception, match="(?i)generator|proxy|unsupported"):
        torch.compile(draw, fullgraph=True, backend="eager")(
            probs, torch.Generator().manual_seed(1)
        )
    torch._dynamo.reset()
    got = torch.compile(draw, backend="eager")(probs, torch.Generator().manual_seed(1))
    assert torch.equal(got, draw(probs, torch.Generator().manual_seed(1)))


def test_check_nan_cannot_be_traced():
    probs = _inputs()[1]

    def draw(p):
        return aotinfer.sampling_from_probs(p, check_nan=True)

    # A data-dependent branch: a graph break, which fullgraph refuses.
    with pytest.raises(torch._dynamo.exc.TorchDynamoException):
        torch.compile(draw, fullgraph=True, backend="eager")(probs)


def _op_cases():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 100, generator=g)
    probs = torch.softmax(logits, -1)
    k32 = torch.tensor([1, 5, 10, 100], dtype=torch.int32)
    draft = torch.softmax(torch.randn(2, 3, 10, generator=g), -1)
    target = torch.softmax(torch.randn(2, 4, 10, generator=g), -1)
    ids = torch.randint(0, 10, (2, 3), generator=g)
    zeros = torch.zeros(2, dtype=torch.int32)
    seeds = torch.tensor([1, 2, 3, 4, 5])
    return {
        "softmax": (_sampling_ops.softmax.op, (logits, None, 0.7, None)),
        "softmax_per_row": (_sampling_ops.softmax.op, (logits, torch.rand(4) + 0.5, 1.0, True)),
        "sample_probs": (
            _sampling_ops.sample.op,
            (
                probs,
                False,
                torch.tensor([0, 1, 1, 3, 3]),
                4,
                k32,
                0,
                None,
                0.9,
                None,
                0.0,
                None,
                seeds,
                0,
                None,
                7,
                False,
            ),
        ),
        "sample_logits": (
            _sampling_ops.sample.op,
            (logits, True, None, 0, None, 0, None, 1.0, None, 0.0, None, None, 5, None, 8, False),
        ),
        "renorm": (_sampling_ops.renorm.op, (probs, 1, k32, 0, None, 1.0)),
        "top_k_mask": (_sampling_ops.top_k_mask.op, (logits, None, 5)),
        "top_k_select": (_sampling_ops.top_k_select.op, (logits, 5, True)),
        "chain_speculative": (
            _sampling_ops.chain_speculative.op,
            (draft, ids, target, zeros.clone(), zeros.clone(), None, None, 1, None, 2, False),
        ),
    }


@pytest.mark.parametrize("name", list(_op_cases()))
def test_opcheck(name):
    op, args = _op_cases()[name]
    torch.library.opcheck(op, args)


def test_ops_are_registered_and_seeded_ones_are_tagged():
    for name in ("softmax", "sample", "renorm", "top_k_mask", "top_k_select", "chain_speculative"):
        assert hasattr(torch.ops.aotinfer, name)
    assert torch.Tag.nondeterministic_seeded in torch.ops.aotinfer.sample.default.tags
    assert torch.Tag.nondeterministic_seeded in torch.ops.aotinfer.chain_speculative.default.tags


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_ints_that_change_do_not_recompile(backend):
    """A seed / offset per step and a top_k per request as Python ints: after the first two
    calls (torch marks a changed int dynamic) no new value compiles again; before, each one
    did, and under fullgraph the ninth stopped with the recompile limit. The same tokens as
    eager calls with the same numbers. (Python floats still specialise: README.)"""
    torch.manual_seed(0)
    logits = torch.randn(4, 64)
    probs = torch.softmax(logits, -1)
    draft, target = probs[:, None].clone(), torch.softmax(torch.randn(4, 2, 64), -1)
    ids = torch.randint(0, 64, (4, 1), dtype=torch.int32)

    def step(logits, probs, seed, k):
        rnd = dict(seed=seed, offset=4 * seed)
        return (
            aotinfer.top_k_top_p_sampling_from_probs(probs, k, 0.8, **rnd),
            aotinfer.top_k_top_p_sampling_from_logits(
                logits, k, 0.8, filter_apply_order="joint", **rnd
            ),
            aotinfer.top_k_sampling_from_probs(probs, k, **rnd),
            aotinfer.min_p_sampling_from_probs(probs, 0.1, **rnd),
            aotinfer.sampling_from_logits(logits, **rnd),
            aotinfer.top_k_renorm_probs(probs, k),
            aotinfer.top_k_mask_logits(logits, k),
            aotinfer.chain_speculative_sampling(draft, ids, target, **rnd)[0],
        )

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for n, (seed, k) in enumerate((s, 3 + s) for s in range(12)):
        with torch._dynamo.config.patch(error_on_recompile=n >= 2):
            got = compiled(logits, probs, seed, k)
        for g, w in zip(got, step(logits, probs, seed, k)):
            assert torch.equal(g, w), (seed, k)


class _RecordOps(TorchDispatchMode):
    """A user's dispatch mode that only records the aotinfer ops it sees and runs them."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aotinfer":
            self.ops.append((func.__name__.split(".")[0], args))
        return func(*args, **(kwargs or {}))


def test_traced_calls_take_int_arguments_as_tensors_and_draw_what_eager_calls_draw():
    """What the public functions hand the ops while traced (under torch.compile, or here
    under a dispatch mode, where the rewrite runs as plain Python): a scalar top_k in use
    as a per-row int32 tensor and explicit int seed / offset as int64 tensors of length 1
    (a graph input rather than a constant), the generator path unchanged; the outputs
    those of the eager calls."""
    logits, probs, _, _ = _inputs()
    draft = torch.softmax(torch.randn(4, 2, 100), -1)
    target = torch.softmax(torch.randn(4, 3, 100), -1)
    ids = torch.randint(0, 100, (4, 2))
    calls = {
        "renorm_k": lambda: aotinfer.top_k_renorm_probs(probs, 5),
        "renorm_p": lambda: aotinfer.top_p_renorm_probs(probs, 0.5),
        "mask": lambda: aotinfer.top_k_mask_logits(logits, 3),
        "chain_seed": lambda: aotinfer.chain_speculative_sampling(
            draft, ids, target, seed=4, offset=8
        ),
        "chain_generator": lambda: aotinfer.chain_speculative_sampling(draft, ids, target),
        "sample_generator": lambda: aotinfer.top_k_sampling_from_probs(probs, 7),
    }
    for name, call in calls.items():
        torch.manual_seed(11)
        with _RecordOps() as mode:
            got = call()
        torch.manual_seed(11)
        want = call()
        for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
            assert torch.equal(g, w), name
        [(op, args)] = mode.ops
        if name == "renorm_k":
            assert op == "renorm" and args[3] == 0 and args[2].tolist() == [5] * 4
            assert args[2].dtype == torch.int32
        elif name == "renorm_p":
            assert op == "renorm" and args[2:6] == (None, 0, None, 0.5)  # top_k not in use
        elif name == "mask":
            assert op == "top_k_mask" and args[2] == 0 and args[1].tolist() == [3] * 4
        elif name == "chain_seed":
            assert op == "chain_speculative" and args[7] == args[9] == 0
            assert args[6].tolist() == [4] and args[8].tolist() == [8]
            assert args[6].dtype == args[8].dtype == torch.int64 and args[10] is False
        elif name == "chain_generator":
            assert args[5:11] == (None, None, 0, None, 0, True)
        else:
            assert op == "sample" and args[4].tolist() == [7] * 4
            assert args[10:16] == (None, None, 0, None, 0, True)
