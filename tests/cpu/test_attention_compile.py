"""torch.compile(fullgraph=True) over the attention functions, on CPU tensors (the same
custom ops serve CUDA): each compiled call gives the eager call's result, mutations reach
the caller's tensors, and re-planning a decode wrapper between calls does not recompile."""

from __future__ import annotations

import pytest
import torch
from compile_support import BACKENDS, MARKS, fresh_dynamo  # noqa: F401 (the fixture)
from test_decode_api import HKV, HQ, PS, D, make_batch, workspace
from test_page_cascade_api import _append_case, _check_appended, _halves
from torch.utils._python_dispatch import TorchDispatchMode

import aotinfer

pytestmark = MARKS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_batch_decode_run_compiles_and_replans_without_recompiling(backend, layout):
    q, cache, indptr, indices, last = make_batch([1, 17, 40], layout=layout)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout)
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    compiled = torch.compile(
        lambda q, c: w.run(q, c, return_lse=True), fullgraph=True, backend=backend
    )
    out, lse = compiled(q, cache)
    want_out, want_lse = w.run(q, cache, return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    # A serving loop re-plans every step over the same cache: new lengths and pages (here
    # 5, 33 and 2 keys on pages 7; 0, 9, 3; 10), new queries, the same graph.
    i32 = dict(dtype=torch.int32)
    w.plan(
        torch.tensor([0, 1, 4, 5], **i32),
        torch.tensor([7, 0, 9, 3, 10], **i32),
        torch.tensor([5, 1, 2], **i32),
        HQ,
        HKV,
        D,
        PS,
    )
    q2 = torch.randn_like(q)
    with torch._dynamo.config.patch(error_on_recompile=True):
        out2, lse2 = compiled(q2, cache)
    want_out2, want_lse2 = w.run(q2, cache, return_lse=True)
    assert torch.equal(out2, want_out2) and torch.equal(lse2, want_lse2)


def test_batch_decode_run_with_out_scales_window_and_tuple_cache():
    q, cache, indptr, indices, last = make_batch([9, 17, 40], tuple_cache=True)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    sinks = torch.randn(HQ)

    def run(q, k, v, out):
        return w.run(q, (k, v), out=out, k_scale=0.5, window_left=4, sinks=sinks)

    out = torch.full_like(q, float("nan"))
    got = torch.compile(run, fullgraph=True, backend="aot_eager")(q, *cache, out)
    want = w.run(q, cache, k_scale=0.5, window_left=4, sinks=sinks)
    assert torch.equal(out, want) and torch.equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_decode_aliases_and_deprecated_forward_compile(backend):
    """run_return_lse and the deprecated forward() / forward_return_lse() trace too (as
    partialmethods they stopped dynamo: "Observed exception" under fullgraph=True);
    forward()'s per-call options reach the graph, and the plan's stay as they were."""
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:2], float("nan"))
    alias = torch.compile(
        lambda q, c, o, s: w.run_return_lse(q, c, out=o, lse=s), fullgraph=True, backend=backend
    )
    alias(q, cache, out, lse)
    want_out, want_lse = w.run(q, cache, return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    opts = ("ALIBI", None, 0.5, 2.0, 7, 5.0)  # mode, q / k / v scales, window, soft cap
    fwd = torch.compile(
        lambda q, c: w.forward_return_lse(q, c, *opts), fullgraph=True, backend=backend
    )
    got = fwd(q, cache)
    want = w.forward_return_lse(q, cache, *opts)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(got[0], want_out)  # the options took effect
    plain = torch.compile(lambda q, c: w.forward(q, c), fullgraph=True, backend=backend)
    assert torch.equal(plain(q, cache), want_out)
    assert torch.equal(w.run(q, cache), want_out)  # forward() left the plan's options alone


def test_batch_decode_alias_signatures_match_flashinfers_partialmethods():
    """The aliases are plain functions now, with the signatures the partialmethods had."""
    import inspect

    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper
    for name, default in [
        ("run_return_lse", True),
        ("forward", False),
        ("forward_return_lse", True),
    ]:
        alias = getattr(w, name)
        assert alias.__name__ == name
        assert inspect.signature(alias).parameters["return_lse"].default is default
    assert list(inspect.signature(w.forward).parameters)[:4] == [
        "self",
        "q",
        "paged_kv_cache",
        "pos_encoding_mode",
    ]
    q, cache, indptr, indices, last = make_batch([3, 9])
    planned = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    planned.plan(indptr, indices, last, HQ, HKV, D, PS)
    assert isinstance(planned.run_return_lse(q, cache, return_lse=False), torch.Tensor)


def test_batch_decode_run_errors_surface_when_the_graph_runs():
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    compiled = torch.compile(lambda q, c: w.run(q, c), fullgraph=True, backend="eager")
    with pytest.raises(ValueError, match="paged_kv_cache has 8 KV heads"):
        compiled(q, torch.cat([cache] * 4, dim=3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_decode_compiles(backend):
    q, cache, *_ = make_batch([40])
    q = q[0]
    k, v = cache[:3, 0].reshape(-1, HKV, D), cache[:3, 1].reshape(-1, HKV, D)

    def single(q, k, v):
        return aotinfer.single_decode_with_kv_cache(
            q, k, v, pos_encoding_mode="ALIBI", window_left=7, return_lse=True
        )

    out, lse = torch.compile(single, fullgraph=True, backend=backend)(q, k, v)
    want_out, want_lse = single(q, k, v)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    plain = torch.compile(
        lambda q, k, v: aotinfer.single_decode_with_kv_cache(q, k, v),
        fullgraph=True,
        backend=backend,
    )
    assert torch.equal(plain(q, k, v), aotinfer.single_decode_with_kv_cache(q, k, v))


@pytest.mark.parametrize("backend", BACKENDS)
def test_merges_compile(backend):
    g = torch.Generator().manual_seed(0)
    va, vb = torch.randn(4, 2, 8, generator=g), torch.randn(4, 2, 8, generator=g)
    sa, sb = torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g)
    got = torch.compile(aotinfer.merge_state, fullgraph=True, backend=backend)(va, sa, vb, sb)
    want = aotinfer.merge_state(va, sa, vb, sb)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    vs, ss = torch.randn(4, 3, 2, 8, generator=g), torch.randn(4, 3, 2, generator=g)
    got = torch.compile(aotinfer.merge_states, fullgraph=True, backend=backend)(vs, ss)
    want = aotinfer.merge_states(vs, ss)
    assert all(torch.equal(a, b) for a, b in zip(got, want))

    def in_place(v, s, v_other, s_other, mask):
        aotinfer.merge_state_in_place(v, s, v_other, s_other, mask)
        return v * 1

    mask = torch.tensor([True, False, True, True])
    v1, s1, v2, s2 = va.clone(), sa.clone(), va.clone(), sa.clone()
    torch.compile(in_place, fullgraph=True, backend=backend)(v1, s1, vb, sb, mask)
    aotinfer.merge_state_in_place(v2, s2, vb, sb, mask)
    assert torch.equal(v1, v2) and torch.equal(s1, s2)  # the caller's tensors were updated


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tuple_cache", [False, True])
def test_append_compiles_and_writes_the_callers_cache(backend, tuple_cache):
    c = _append_case("NHD", tuple_cache)
    before = [t.clone() for t in _halves(c["cache"])]

    def append(k, v, cache, kv_indices, kv_indptr, last, append_indptr):
        seq_lens = aotinfer.get_seq_lens(kv_indptr, last, c["ps"])
        b, p = aotinfer.get_batch_indices_positions(append_indptr, seq_lens, c["nnz"])
        aotinfer.append_paged_kv_cache(k, v, b, p, cache, kv_indices, kv_indptr, last)

    torch.compile(append, fullgraph=True, backend=backend)(
        c["k"], c["v"], c["cache"], c["kv_indices"], c["kv_indptr"], c["last"],
        c["append_indptr"],
    )  # fmt: skip
    _check_appended(c, "NHD")
    changed = sum(int((a != b).any(-1).sum()) for a, b in zip(before, _halves(c["cache"])))
    assert changed <= 2 * c["nnz"] * 2


def test_batch_decode_run_traced_keeps_the_eager_checks():
    """A traced run() makes run()'s own checks: unsupported options raise, and the deprecated
    q_len_per_req still reaches the plan's check (it was dropped on the way to the op)."""
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    sf = torch.compile(lambda q, c: w.run(q, c, kv_cache_sf=q), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="kv_cache_sf"):
        sf(q, cache)
    torch._dynamo.reset()
    q_len = torch.compile(lambda q, c: w.run(q, c, q_len_per_req=2), backend="eager")
    with pytest.raises(ValueError, match="q_len_per_req=2 was passed to run"):
        q_len(q, cache)


class _RecordOps(TorchDispatchMode):
    """A user's dispatch mode: records each op that reaches it and runs it."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_cascade_page_and_single_decode_under_a_dispatch_mode_call_their_ops():
    """Under a dispatch mode (as under make_fx, export or FakeTensorMode) each function runs
    as its one aotinfer op, with the eager call's result and mutations. (torch.compile takes
    these branches too, but dynamo only interprets their Python: it is this path that runs
    them.)"""
    g = torch.Generator().manual_seed(0)
    va, vb = torch.randn(4, 2, 8, generator=g), torch.randn(4, 2, 8, generator=g)
    sa, sb = torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g)
    vs, ss = torch.randn(4, 3, 2, 8, generator=g), torch.randn(4, 3, 2, generator=g)
    mask = torch.tensor([True, False, True, True])
    v1, s1, v2, s2 = va.clone(), sa.clone(), va.clone(), sa.clone()
    with _RecordOps() as mode:
        merged = aotinfer.merge_state(va, sa, vb, sb)
        merged_n = aotinfer.merge_states(vs, ss)
        aotinfer.merge_state_in_place(v1, s1, vb, sb, mask)
    assert mode.ops == [
        "aotinfer.merge_state.default",
        "aotinfer.merge_states.default",
        "aotinfer.merge_state_in_place.default",
    ]
    assert all(torch.equal(a, b) for a, b in zip(merged, aotinfer.merge_state(va, sa, vb, sb)))
    assert all(torch.equal(a, b) for a, b in zip(merged_n, aotinfer.merge_states(vs, ss)))
    aotinfer.merge_state_in_place(v2, s2, vb, sb, mask)
    assert torch.equal(v1, v2) and torch.equal(s1, s2)

    q, cache, *_ = make_batch([40])
    q, k, v = q[0], cache[:3, 0].reshape(-1, HKV, D), cache[:3, 1].reshape(-1, HKV, D)
    with _RecordOps() as mode:
        out, lse = aotinfer.single_decode_with_kv_cache(q, k, v, window_left=7, return_lse=True)
        plain = aotinfer.single_decode_with_kv_cache(q, k, v)
    assert mode.ops == ["aotinfer.single_decode.default"] * 2
    want = aotinfer.single_decode_with_kv_cache(q, k, v, window_left=7, return_lse=True)
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
    assert torch.equal(plain, aotinfer.single_decode_with_kv_cache(q, k, v))

    for tuple_cache in (False, True):
        c = _append_case("NHD", tuple_cache)
        seq_lens = aotinfer.get_seq_lens(c["kv_indptr"], c["last"], c["ps"])
        b, p = aotinfer.get_batch_indices_positions(c["append_indptr"], seq_lens, c["nnz"])
        with _RecordOps() as mode:
            aotinfer.append_paged_kv_cache(
                c["k"], c["v"], b, p, c["cache"], c["kv_indices"], c["kv_indptr"], c["last"]
            )
        assert mode.ops == ["aotinfer.append_paged_kv_cache.default"]
        _check_appended(c, "NHD")


def test_decode_wrapper_under_a_dispatch_mode_calls_its_ops():
    """run() (5-D and tuple caches, with and without the LSE, into the caller's buffers) and
    the deprecated forward() under a dispatch mode: outputs not given are allocated from q's
    shape and the planned dtype, then one aotinfer op fills them, as eagerly."""
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    want_out, want_lse = w.run(q, cache, return_lse=True)
    for c in (cache, (cache[:, 0], cache[:, 1])):
        with _RecordOps() as mode:
            out, lse = w.run(q, c, return_lse=True)
            plain = w.run(q, c)
        assert mode.ops.count("aotinfer.batch_decode.default") == 2
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
        assert torch.equal(plain, want_out)
    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:2], float("nan"))
    with _RecordOps() as mode:
        res = w.run(q, cache, out=out, lse=lse, return_lse=True)
    assert mode.ops == ["aotinfer.batch_decode.default"]  # the caller's buffers, filled
    assert res[0] is out and res[1] is lse
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    opts = ("ALIBI", None, 0.5, 2.0, 7, 5.0)  # mode, q / k / v scales, window, soft cap
    with _RecordOps() as mode:
        fwd = w.forward_return_lse(q, cache, *opts)
        fwd_plain = w.forward(q, cache)
    assert mode.ops.count("aotinfer.batch_decode_forward.default") == 2
    want = w.forward_return_lse(q, cache, *opts)
    assert torch.equal(fwd[0], want[0]) and torch.equal(fwd[1], want[1])
    assert torch.equal(fwd_plain, want_out)


def test_a_traced_run_whose_wrapper_is_gone_says_so():
    """A traced graph reaches its wrapper by key; once the wrapper is collected the graph's
    call raises a RuntimeError that says so (not a KeyError from the registry)."""
    import gc

    from torch.fx.experimental.proxy_tensor import make_fx

    q, cache, indptr, indices, last = make_batch([1, 17, 40])

    def trace_then_drop_the_wrapper():
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
        w.plan(indptr, indices, last, HQ, HKV, D, PS)
        graph = make_fx(lambda q, c: w.run(q, c))(q, cache)
        assert torch.equal(graph(q, cache), w.run(q, cache))
        return graph

    graph = trace_then_drop_the_wrapper()
    gc.collect()
    with pytest.raises(RuntimeError, match="this compiled call was traced with no longer exists"):
        graph(q, cache)
