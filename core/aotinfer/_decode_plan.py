"""The split-KV planner of batch decode, and the carving of its partial buffers out of the
user's float workspace. Pure host arithmetic: the only device fact it needs is the number
of multiprocessors, which the caller supplies.

Cost model (flash-decoding). The kernel runs one CTA per (request, KV head, split); split s
of request b handles its pages ``[s * chunk_pages, (s + 1) * chunk_pages)`` and a merge
combines the splits. We want the useful CTAs to cover about ``WAVES`` waves of the card
(``WAVES * num_sms`` CTAs) with equal work each, so a long request among short ones is cut
into pieces about as large as everybody's fair share:

1. ``chunk = ceil(total_pages * Hkv / (WAVES * num_sms))``: the fair share of 2 waves.
2. ``chunk >= ceil(MIN_CHUNK_TOKENS / page_size)``: a smaller chunk costs more in partial
   writes and merging than the extra parallelism gives back.
3. The grid is ``B * Hkv * max_splits`` whatever the page table (empty splits exit at
   once), so ``max_splits`` is capped at ``GRID_CTAS_PER_SM * num_sms / (B * Hkv)`` to
   bound the cost of those empty CTAs, and at what the workspace holds; ``chunk`` grows
   until the longest request fits in the cap.
4. ``max_splits = ceil(max_pages / chunk)``, or one less when that finishes sooner: a
   count just past a wave boundary (128 units x 3 splits = 384 CTAs on 264 slots) costs a
   second wave, so the estimated time ``ceil(CTAs / slots) * ceil(max_pages / splits)``
   decides between the two. Then ``chunk = ceil(max_pages / max_splits)`` evens out the
   pieces of the longest request. ``max_splits == 1`` means no split and no partial buffers.

``WAVES * num_sms`` is also the number of CTAs resident at once: the tensor-core kernel at
head dim 128 fits two per multiprocessor (decode_tc_kernel.cuh). ``MIN_CHUNK_TOKENS`` is 128,
two 16-key tiles per warp: short requests still spread over the card (batch 1, kv 1024: 8
splits x 8 heads), and the merge of their partial rows costs less than the idle SMs would.
Measured on an H200 at batch 1, kv 1024 (dev/sweep_decode.py, per call in a 10-call graph):
4 splits 13.6 us, 8 splits 10.5 us, 16 splits (the earlier 64-token minimum) 12.3 us, no
split 27.1 us.

In CUDA-graph mode the grid and ``chunk_pages`` are baked into the captured launch, so the
plan must serve any page table that fits the buffers: it is computed once from the fixed
batch size and ``max_num_pages`` (the indices buffer's length), taking ``total_pages =
max_pages = max_num_pages`` (one request may own every page). Every later plan gives the
same numbers, so a captured graph stays valid when new page tables are copied in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch

WAVES = 2
MIN_CHUNK_TOKENS = 128
GRID_CTAS_PER_SM = 32
ROW_BLOCK = 16  # query rows per CTA (kRowBlock in decode_common.cuh)
# Work-list cost model (plan_work): fixed cost of a wave and of the merge, in pages of
# streaming, and the finer chunk tried besides the fair share.
WAVE_OVERHEAD_PAGES = 2
MERGE_PAGES = 2
FINER_SPLIT = 2
ALIGN = 256  # bytes between carved buffers


@dataclass(frozen=True)
class SplitPlan:
    """How the kernel cuts requests: ``chunk_pages`` pages per split, at most
    ``max_splits`` splits per request (1: no split-KV).

    With a work list (:func:`plan_work`), ``work`` is the ``(items, 4)`` int32 host table of
    (request, partial slot or -1, first page, end page) in launch order, ``split_counts`` the
    ``(batch,)`` int32 splits per request, and ``chunk_pages`` the largest item's pages."""

    chunk_pages: int
    max_splits: int
    work: Optional[torch.Tensor] = field(default=None, compare=False)
    split_counts: Optional[torch.Tensor] = field(default=None, compare=False)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(n: int) -> int:
    return _ceil_div(n, ALIGN) * ALIGN


def partial_bytes(rows: int, max_splits: int, num_qo_heads: int, head_dim: int) -> int:
    """Workspace bytes for partial_out ``(rows, S, Hq, D)`` and partial_lse ``(rows, S, Hq)``,
    float32, each starting on an ``ALIGN`` boundary. Zero when ``max_splits == 1``."""
    if max_splits <= 1:
        return 0
    n = rows * max_splits * num_qo_heads
    return _align(n * head_dim * 4) + _align(n * 4)


def splits_that_fit(workspace_bytes: int, rows: int, num_qo_heads: int, head_dim: int) -> int:
    """The largest split count whose partial buffers fit in ``workspace_bytes`` (>= 1)."""
    per_split = rows * num_qo_heads * (head_dim + 1) * 4
    s = max(1, workspace_bytes // max(per_split, 1))
    while s > 1 and partial_bytes(rows, s, num_qo_heads, head_dim) > workspace_bytes:
        s -= 1
    return s


def plan_splits(
    *,
    batch: int,
    max_pages: int,
    total_pages: int,
    page_size: int,
    num_kv_heads: int,
    num_sms: int,
    max_splits_allowed: int,
) -> SplitPlan:
    """The cost model of the module docstring.

    Parameters
    ----------
    batch : int
        Requests in the grid (the fixed batch size in CUDA-graph mode).
    max_pages, total_pages : int
        Pages of the longest request and of all requests (both ``max_num_pages`` in
        CUDA-graph mode).
    max_splits_allowed : int
        What the workspace holds (:func:`splits_that_fit`).
    """
    max_pages = max(max_pages, 1)
    units = max(batch * num_kv_heads, 1)
    cap = min(max_splits_allowed, max(1, (GRID_CTAS_PER_SM * num_sms) // units))
    chunk = _ceil_div(max(total_pages, 1) * num_kv_heads, WAVES * num_sms)
    chunk = max(chunk, _ceil_div(MIN_CHUNK_TOKENS, page_size), _ceil_div(max_pages, cap), 1)
    splits = _ceil_div(max_pages, chunk)
    if splits > 2:
        slots = WAVES * num_sms

        def cost(s: int) -> int:
            c = _ceil_div(max_pages, s)
            ctas = min(units * s, num_kv_heads * (_ceil_div(total_pages, c) + batch))
            return _ceil_div(ctas, slots) * c

        if cost(splits - 1) <= cost(splits):
            splits -= 1
    if splits <= 1:
        return SplitPlan(chunk_pages=max_pages, max_splits=1)
    return SplitPlan(chunk_pages=_ceil_div(max_pages, splits), max_splits=splits)


def _wave_time(sizes_desc: torch.Tensor, units: int, slots: int) -> int:
    """Estimated time, in pages, of CTAs of ``units`` per item with item sizes ``sizes_desc``
    (descending) on ``slots`` resident CTAs: wave k starts at CTA ``k * slots`` and lasts as
    long as its first (largest) item, plus ``WAVE_OVERHEAD_PAGES`` per wave."""
    waves = _ceil_div(sizes_desc.numel() * units, slots)
    starts = torch.arange(waves, dtype=torch.int64) * slots // units
    return int(sizes_desc[starts].sum()) + WAVE_OVERHEAD_PAGES * waves


def plan_work(
    pages: torch.Tensor,
    *,
    num_kv_heads: int,
    row_blocks: int,
    page_size: int,
    num_sms: int,
    max_splits_allowed: int,
    force_chunk: Optional[int] = None,
) -> SplitPlan:
    """The work-list plan of the module docstring for requests of ``pages`` pages (host
    int tensor). ``force_chunk`` skips the cost model (dev/sweep_decode_plan.py measures
    each candidate with it)."""
    pages = pages.to(torch.int64)
    batch = pages.numel()
    units = max(num_kv_heads * row_blocks, 1)
    slots = WAVES * num_sms
    max_pages = max(int(pages.max()), 1) if batch else 1
    min_chunk = _ceil_div(MIN_CHUNK_TOKENS, page_size)
    fair = _ceil_div(int(pages.sum()) * units, slots)

    def counts_for(c: int) -> torch.Tensor:
        return ((pages + c - 1) // c).clamp(1, max(max_splits_allowed, 1))

    if force_chunk is not None:
        counts = counts_for(max(force_chunk, 1))
    else:
        candidates = {max_pages}
        for c in (max(min_chunk, fair), max(min_chunk, _ceil_div(fair, FINER_SPLIT))):
            candidates.add(c)
            s = _ceil_div(max_pages, c)
            if s > 1:
                candidates.add(_ceil_div(max_pages, s - 1))
        best = None
        for c in sorted(candidates, reverse=True):  # ties keep the larger chunk
            n = counts_for(c)
            piece = (pages + n - 1) // n
            sizes = torch.repeat_interleave(piece, n).sort(descending=True).values
            t = _wave_time(sizes, units, slots) + (MERGE_PAGES if int(n.max()) > 1 else 0)
            if best is None or t < best[0]:
                best = (t, n)
        counts = best[1]

    # Request b's pieces: [s * p // n, (s + 1) * p // n) for s < n, never empty when p >= n.
    n_items = int(counts.sum())
    req = torch.repeat_interleave(torch.arange(batch, dtype=torch.int64), counts)
    first = torch.cumsum(counts, 0) - counts
    s = torch.arange(n_items, dtype=torch.int64) - first[req]
    p, n = pages[req], counts[req]
    lo, hi = s * p // n, (s + 1) * p // n
    slot = torch.where(n > 1, s, torch.full_like(s, -1))
    # Largest pieces first: the block scheduler starts CTAs in grid order, so the small ones
    # fill the slots the large ones leave and the grid ends on short work.
    order = torch.sort(hi - lo, descending=True, stable=True).indices
    work = torch.stack([req, slot, lo, hi], 1)[order].to(torch.int32).contiguous()
    max_splits = int(counts.max()) if batch else 1
    chunk = max(int((hi - lo).max()), 1) if n_items else 1
    return SplitPlan(
        chunk_pages=chunk,
        max_splits=max_splits,
        work=work,
        split_counts=counts.to(torch.int32),
    )


def plan_fixed(max_pages: int, chunk_pages: int, max_splits_allowed: int) -> SplitPlan:
    """``fixed_split_size`` given by the user: ``chunk_pages`` pages per split."""
    splits = _ceil_div(max(max_pages, 1), chunk_pages)
    if splits > max_splits_allowed:
        raise ValueError(
            f"fixed_split_size={chunk_pages} pages cuts the longest request ({max_pages} pages) "
            f"into {splits} splits, but the float workspace holds partial results for at most "
            f"{max_splits_allowed}; pass a larger fixed_split_size or a larger workspace"
        )
    return SplitPlan(chunk_pages=chunk_pages, max_splits=max(splits, 1))


def carve_partials(
    workspace: torch.Tensor, rows: int, max_splits: int, num_qo_heads: int, head_dim: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``partial_out (rows, S, Hq, D)`` and ``partial_lse (rows, S, Hq)`` float32 views of the
    workspace (which is contiguous and 16-byte aligned)."""
    raw = workspace.view(-1).view(torch.uint8)
    n = rows * max_splits * num_qo_heads
    out_bytes = n * head_dim * 4
    lse_at = _align(out_bytes)
    partial_out = raw[:out_bytes].view(torch.float32).view(rows, max_splits, num_qo_heads, head_dim)
    partial_lse = (
        raw[lse_at : lse_at + n * 4].view(torch.float32).view(rows, max_splits, num_qo_heads)
    )
    return partial_out, partial_lse
