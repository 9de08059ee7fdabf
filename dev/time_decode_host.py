"""Kernel lab: host time of one eager decode run() and of its parts, to find where the
decode host-time goal (15 us per eager run()) is lost.

For each shape: the whole run() (with and without ``out``), through the provider's prepared
launch (the default) and through the full call (a wrapper planned with
AOTINFER_DECODE_PREPARED=off: every view passed and checked on every call), both in this
process; the prepared launch alone on the exact integers run() passes; the full provider
call alone on the exact arguments run() passes (recorded once), the same call on a zero-row
batch (every check and the argument packing, no launch: the launcher returns before it
launches), and
the pieces run() adds in Python (output allocation, views, stream query); where a plan
merges in the grid only when eager (one split request), the same run() on the merge kernel.
Each figure is the median of three interleaved rounds of 200 calls. Then floors that
say how fast this host is: a trivial provider call, a torch in-place add (torch's own
dispatch and launch), ``torch.empty``, and a pure-Python loop (to compare hosts).

The GPU is held busy by a long ``torch.cuda._sleep`` first, so every timed call only
enqueues: the figures are CPU time per call, not kernel time.

    python dev/time_decode_host.py [ROUNDS]   (GPU machine, provider installed; ROUNDS
                                              interleaved rounds per figure, default 3)
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from bench_common import print_host_times, warm_up_host  # noqa: E402
from bench_decode import DT, HKV, HQ, PAGE, D, paged_setup  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import _views  # noqa: E402

SHAPES = [(1, 1024), (16, 1024), (64, 4096)]


def recorded_provider_args(w, q, cache):
    """The positional arguments run() passes to kernels.batch_decode, recorded from one call."""
    seen = {}
    kernels = w._plan.kernels

    class Recorder:
        def batch_decode(self, *args):
            seen["args"] = args
            kernels.batch_decode(*args)

    w._plan.kernels = Recorder()
    try:
        w.run(q, cache)
    finally:
        w._plan.kernels = kernels
    return seen["args"]


def zero_row_args(args):
    """``args`` with q, out and the page table cut to zero requests (views are 5-tuples:
    ptr, dtype, shape, strides, device), so the launcher checks and packs but launches
    nothing. Positions follow kernels.batch_decode's signature."""
    args = list(args)

    def rows0(v, shape0):
        return None if v is None else (v[0], v[1], (shape0,) + tuple(v[2][1:]), v[3], v[4])

    args[0] = rows0(args[0], 0)  # q
    args[5] = rows0(args[5], 1)  # indptr: batch + 1 entries
    args[7] = rows0(args[7], 0)  # last_page_len
    args[9] = rows0(args[9], 0)  # out
    args[10] = None  # lse
    args[13] = rows0(args[13], 0) if args[13] is not None else None  # work list
    args[14] = rows0(args[14], 0) if args[14] is not None else None  # split_counts
    return tuple(args)


def planned_wrapper(ws, table, prepared: bool = True):
    """A wrapper planned on bench_decode's options for this page table; ``prepared=False``
    plans it with AOTINFER_DECODE_PREPARED=off (its run() makes the full provider call)."""
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    saved = os.environ.get("AOTINFER_DECODE_PREPARED")
    os.environ["AOTINFER_DECODE_PREPARED"] = "on" if prepared else "off"
    try:
        w.plan(*table, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
    finally:
        if saved is None:
            del os.environ["AOTINFER_DECODE_PREPARED"]
        else:
            os.environ["AOTINFER_DECODE_PREPARED"] = saved
    return w


def planned_shape(batch: int, kv: int, dev, ws):
    """bench_decode's inputs for batch x kv (uniform lengths) and a wrapper planned on them:
    (wrapper, q, out, cache, (indptr, indices, last_page_len))."""
    g = torch.Generator().manual_seed(batch + kv)
    cache, indptr, indices, last = paged_setup([kv] * batch, g)
    q = torch.randn(batch, HQ, D, dtype=DT, device=dev)
    out = torch.empty_like(q)
    w = planned_wrapper(ws, (indptr, indices, last))
    return w, q, out, cache, (indptr, indices, last)


def prepared_launch_args(w, q, cache, out, dev):
    """The prepared launch run() made (after one eager run()) and the integers it passes."""
    (launch,) = w._plan.prepared.values()
    k_ptr = cache.data_ptr()
    v_ptr = k_ptr + cache.stride(1) * cache.element_size()
    ints = (q.data_ptr(), q.stride(0), q.stride(1), k_ptr, v_ptr, cache.shape[0])
    return launch, (*ints, out.data_ptr(), 0, _views.stream_handle(dev))


def python_loop_us(n: int = 1000) -> float:
    """A fixed pure-Python workload (attribute reads, a call, tuple building), to compare
    this host's interpreter speed with another's."""

    class Box:
        a, b = 1, 2

    def f(x):
        return (x.a, x.b, x.a + x.b)

    box = Box()
    t = time.perf_counter()
    for _ in range(n):
        f(box)
    return (time.perf_counter() - t) / n * 1e6


def time_shape(batch: int, kv: int, dev, ws, rounds: int):
    """Prints the host times of one batch shape's calls (and, at batch 1, a profile of
    run()); returns its plan's kernels (the provider module). A function of its own, so that
    the timed closures bind this shape's tensors and free them on return."""
    w, q, out, cache, (indptr, indices, last) = planned_shape(batch, kv, dev, ws)
    p = w._plan
    w.run(q, cache)
    launch, launch_args = prepared_launch_args(w, q, cache, out, dev)
    full = planned_wrapper(ws, (indptr, indices, last), prepared=False)
    # what an fp8 cache with scales or a model with attention sinks passes on every call
    per_call = dict(sinks=torch.zeros(HQ, device=dev), k_scale=0.5, v_scale=2.0)
    args = recorded_provider_args(full, q, cache)
    args0 = zero_row_args(args)
    k = p.kernels
    merge_kernel = None
    if p.eager_split_args is not None:  # the same plan, eager calls on the merge kernel
        merge_kernel = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
        merge_kernel.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=DT, kv_data_type=DT)
        merge_kernel._plan.eager_split_args = None
    parts = {
        "run(q, cache)": lambda: w.run(q, cache),
        "run(q, cache), full call (AOTINFER_DECODE_PREPARED=off)": lambda: full.run(q, cache),
        "run(q, cache, out=out)": lambda: w.run(q, cache, out=out),
        "run(q, cache, out=out), full call": lambda: full.run(q, cache, out=out),
        "PreparedDecode.launch(recorded ints)": lambda: launch.launch(*launch_args),
        "run(q, cache, sinks=, k_scale=, v_scale=)": lambda: w.run(q, cache, **per_call),
        "run(q, cache, sinks=, k_scale=, v_scale=), full call": lambda: full.run(
            q, cache, **per_call
        ),
        "kernels.batch_decode(recorded args)": lambda: k.batch_decode(*args),
        "kernels.batch_decode(zero rows: checks, no launch)": lambda: k.batch_decode(*args0),
        "torch.empty(q shape)": lambda: torch.empty(p.q_shape, dtype=p.o_dtype, device=dev),
        "_views.view of q and out (run() builds its own, cheaper)": lambda: (
            _views.view(q),
            _views.view(out),
        ),
        "stream_handle": lambda: _views.stream_handle(dev),
    }
    if merge_kernel is not None:
        parts["run(q, cache), eager merge kernel instead of in-grid"] = lambda: merge_kernel.run(
            q, cache
        )
    print(f"batch {batch} x kv {kv}: {p.split.max_splits} splits, "
          f"work list {'yes' if p.work_views[0] is not None else 'no'}")  # fmt: skip
    print_host_times(parts, rounds)
    if batch == 1:
        torch.cuda._sleep(2_000_000_000)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(500):
            w.run(q, cache)
        profile.disable()
        torch.cuda.synchronize()
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    return k


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    dev = torch.device("cuda", 0)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print(f"host time per call in us, GPU busy (torch {torch.__version__})", flush=True)
    warm_up_host()
    for batch, kv in SHAPES:
        k = time_shape(batch, kv, dev, ws, rounds)
        torch.cuda.empty_cache()
    single = {}
    for kv in (1024, 32768):
        qs = torch.randn(HQ, D, dtype=DT, device=dev)
        ks, vs = (torch.randn(kv, HKV, D, dtype=DT, device=dev) for _ in range(2))
        single[f"single_decode_with_kv_cache, kv {kv}"] = lambda qs=qs, ks=ks, vs=vs: (
            aotinfer.single_decode_with_kv_cache(qs, ks, vs)
        )
    print_host_times(single, rounds)
    tiny = torch.zeros(4, device=dev)
    floors = {
        "kernels.runtime_info() (pybind call, two runtime queries)": k.runtime_info,
        "tiny.add_(1) (torch dispatch + one launch)": lambda: tiny.add_(1),
        "torch.empty(4) on the GPU": lambda: torch.empty(4, device=dev),
    }
    print("floors")
    print_host_times(floors, rounds)
    print(f"{min(python_loop_us() for _ in range(20)):8.3f}  pure-Python loop step (compare hosts)")


if __name__ == "__main__":
    main()
