"""The split-KV planners of batch decode, and the carving of its partial buffers out of the
user's float workspace. Pure host arithmetic: the only device fact it needs is the number
of multiprocessors, which the caller supplies.

Two plans, both flash-decoding (pieces of a request's pages run as separate CTAs, one per
KV head, and a merge combines their partial states):

- **Work list** (:func:`plan_work`; every plan except CUDA-graph mode, ``fixed_split_size``
  and ``disable_split_kv``). plan() sees the page table, so it cuts each request b of p_b
  pages into ``n_b = ceil(p_b / chunk)`` balanced pieces and launches exactly one group of
  CTAs per piece, largest pieces first: the block scheduler starts CTAs in grid order, so
  the small pieces fill the slots the large ones free and the grid ends on short work. A
  request of one piece writes its output directly; only split requests are merged, each over
  its own pieces (inside the decode grid by the last piece to finish, or for a single
  request by a merge kernel: the wrapper's plan() says why). ``chunk`` is the candidate
  (multiples ``CHUNK_FACTORS`` of the fair share of one round, ``total_pages * Hkv /
  (WAVES * num_sms)``, at least ``MIN_CHUNK_TOKENS``, or no split) with the least estimated
  time; where the requests' CTAs fill at most one round, also the few chunks just below
  the best at which one of the longest requests gets one piece more
  (:func:`_breakpoints_below`: the factors step too coarsely there, at 16 x 1024 skewed 46
  pages for the longest piece where 39 still fits one round):

  - the CTAs, largest first, run in rounds of ``WAVES * num_sms`` (the CTAs resident at
    once); a round lasts its average work (the card is bandwidth-bound) or, if longer,
    ``LONE_CTA_TIME`` times its largest CTA (a CTA alone on its multiprocessor streams
    faster than one of two, but not twice as fast);
  - each round costs ``ROUND_OVERHEAD_TOKENS`` more (CTA start, pipeline fill, partial
    writes) and a merge ``MERGE_TOKENS`` plus ``MERGE_TOKENS_PER_SPLIT`` per split of the
    most-split request (the merge loads eight splits per memory round trip, so more
    splits cost more round trips on the critical path).

  Fitted to dev/sweep_decode_plan.py on an H200 (32/8 heads, d128, page 16; chunk sizes
  from a quarter to twice the fair share timed on the benchmark's uniform and skewed batches
  of 16-256 requests, and 8-64 pages at batch 1): the model's choice was within 3.3% of the
  fastest measured chunk on every one of the 17 shapes, where the grid plan below was up to
  1.35x slower on skewed batches and a model without the per-split merge cost 1.35x slower
  at batch 1 (kv 4096: 32 splits 23.0 us, 16 splits 17.0). (Measured: 2 vs 1 CTA per
  multiprocessor, 16 x 16384 in 256 vs 128 pieces, 248 vs 327 us, gives 0.66 for a lone
  CTA's time; the fit over all shapes preferred 0.85.) ``MERGE_TOKENS_PER_SPLIT`` was
  refitted after the merges began loading eight splits per round trip (merge_states of 32
  states 9.1 -> 2.7 us): the batch-1 and batch-16 sweep of 1c594a9
  (history/sweep-decode-plan-1c594a9.txt) put 1 x 16384 at 26.1 us with 32 splits and
  27.5 us with the 22 that 24 chose; 12 picks 32 there and changes no other benchmark shape.

- **Runs of entries** (:func:`_plan_runs`, tried by :func:`plan_work` for two or more
  requests). Pieces cut at request ends cannot balance a skewed batch in one wave: at 16 x
  4096 with one 4x request, every chunk either leaves a long piece (the 4x request's) or
  spills a second wave of short ones (a 3-split uniform batch ran 88.6 us against 71.3 for
  2 splits in one wave; the best chunk of the skewed batch 85.3 against the uniform 71.5:
  history/sweep-decode-plan-1c594a9.txt). So plan_work can also give each of the one wave's
  ``WAVES * num_sms / units`` CTA groups a *run* of entries that the CTAs take in turn:
  the requests, in order, are laid end to end and cut into runs of about the same pages
  (a run takes the rest of a request when it overshoots by less than ``MIN_CHUNK_TOKENS``,
  and ends early rather than start a piece shorter than that). A request then spans a few
  runs, its pieces merge as before (the last to finish merges), and every CTA takes about
  the same time. An entry after a run's first counts ``RUN_ENTRY_TOKENS`` keys of time
  (its dependent loads, pipeline fill and drain, partial write and counter), both where
  the runs are cut and in the estimate: the longest run's time, a round's overhead and the
  merge. plan_work takes the runs when that is below ``RUNS_MARGIN`` times the best
  chunk's estimate, and skips their search (a bisection over the run length; its host
  time: history/plan-work-host-b965356.txt, dev/time_plan_work.py) where the best chunk is
  already within that margin of the fair share of one wave (uniform batches of long
  requests; at 16 x 1024 the fixed costs in the chunk's estimate keep the search on).
  ``RUN_ENTRY_TOKENS`` = 128 is fitted to the first A/B of the runs
  (64 then; history/ab-decode-work-runs-a2b30ba.txt): forced on the benchmark's batches of
  16, runs against chunks were 1.134x at kv 1024 skewed (model with 128: 1.061), 0.915x at
  4096 skewed (0.915), 0.923x at 16384 skewed (0.852) and 1.00-1.01x uniform.
  ``AOTINFER_DECODE_WORK_RUNS=auto|always|off`` (README) overrides the choice.

- **Grid** (:func:`plan_splits`; CUDA-graph mode). The grid and ``chunk_pages`` are baked
  into the captured launch, so the plan must serve any page table that fits the buffers:
  the kernel runs ``B * Hkv * max_splits`` CTAs and split s of request b handles pages
  ``[s * chunk_pages, (s + 1) * chunk_pages)`` (empty splits exit at once). It is computed
  from the fixed batch size and ``max_num_pages`` (the indices buffer's length), taking
  ``total_pages = max_pages = max_num_pages`` (one request may own every page), so every
  later plan gives the same numbers and a captured graph stays valid when new page tables
  are copied in:

  1. ``chunk = ceil(total_pages * Hkv / (WAVES * num_sms))``: the fair share of 2 waves.
  2. ``chunk >= ceil(MIN_CHUNK_TOKENS / page_size)``: a smaller chunk costs more in partial
     writes and merging than the extra parallelism gives back.
  3. ``max_splits`` is capped at ``GRID_CTAS_PER_SM * num_sms / (B * Hkv)`` to bound the
     cost of the empty CTAs, and at what the workspace holds; ``chunk`` grows until the
     longest request fits in the cap.
  4. ``max_splits = ceil(max_pages / chunk)``, or one less when that finishes sooner: a
     count just past a wave boundary (128 units x 3 splits = 384 CTAs on 264 slots) costs a
     second wave, so the estimated time ``ceil(CTAs / slots) * ceil(max_pages / splits)``
     decides between the two. Then ``chunk = ceil(max_pages / max_splits)`` evens out the
     pieces of the longest request. ``max_splits == 1`` means no split and no partial
     buffers.

``WAVES * num_sms`` is the number of CTAs resident at once: the tensor-core kernel at head
dim 128 fits two per multiprocessor (decode_tc_kernel.cuh). Both planners take that count as
``resident`` (default ``WAVES``): the wrapper and single decode pass :func:`resident_ctas`,
three at d64 and one at d256. Measured on an H100 against ``WAVES`` everywhere
(history/ab-decode-plan-resident-h100.txt): d64 64 x 4096 0.93x, 16 x 1024 0.95x; d256 16/8
heads 16 x 1024 0.85x, 2-8 requests 0.82-0.97x; d128 unchanged. A single request kept
``WAVES`` until the provider checked that a grid's clusters fit (the kernel's figure then
took Gemma-7B's 16/16 d256 at 1 x 4096 to 8 splits, 128 CTAs in clusters of 8 where an H100
holds 120, 1.15x slower); with the check it is the faster plan at every single request it
changes (H100, history/sweep-decode-batch1-gated-79a5c19-h100.txt: 16/16 d256 1 x 4096
35.7 -> 31.7 us, 1 x 16384 102.3 -> 96.1; 16/8 d256 1 x 16384 59.5 -> 54.9; single decode
16/16 and 16/8 d256 at 4096 keys 34.9 -> 31.2, 25.6 -> 21.0; d64 1 x 4096 9.9 both).
``MIN_CHUNK_TOKENS`` is 128, two
16-key tiles per warp: short requests still spread over the card (batch 1, kv 1024: 8
splits x 8 heads), and the merge of their partial rows costs less than the idle SMs would.
Measured on an H200 at batch 1, kv 1024 (dev/sweep_decode.py, per call in a 10-call graph):
4 splits 13.6 us, 8 splits 10.5 us, 16 splits (the earlier 64-token minimum) 12.3 us, no
split 27.1 us.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from . import _attention_utils as _u

WAVES = 2  # resident CTAs per multiprocessor at head dim 128, the cost model's fit
# CTAs of the tensor-core kernel resident on one multiprocessor by head dim, with 16-bit KV
# (decode_tc_kernel.cuh: its shared memory at depths 4 / 3 / 3, 67.5 / 101.5 / 201.5 KB a
# CTA of the 227 KB an H100 / H200 SM gives, and its __launch_bounds__ 3 / 2 / 1): the
# planners' rounds hold resident * num_sms CTAs. With the d128 figure at d256, 16/8 heads at
# 16 x 1024 were cut into 256 CTAs, two rounds of the one CTA an SM that fits there
# (bench_decode_configs.py). fp8 KV and d128's 2-stage streams take the same figures,
# though their smaller rings would fit a third CTA at d128: the d128 fit is kept there.
RESIDENT_CTAS = {64: 3, 128: 2, 256: 1}


def resident_ctas(head_dim: int) -> int:
    """CTAs of the decode kernel resident on one multiprocessor at ``head_dim``
    (``RESIDENT_CTAS``; WAVES for a head dim it does not list)."""
    return RESIDENT_CTAS.get(head_dim, WAVES)


MIN_CHUNK_TOKENS = 128
GRID_CTAS_PER_SM = 32
ROW_BLOCK = 16  # query rows per CTA (kRowBlock in decode_common.cuh)
# Work-list cost model (plan_work; module docstring): the chunks tried, as multiples of the
# fair share of one round; a lone CTA's time per page relative to one of two sharing a
# multiprocessor; costs of a round of CTAs and of the merge (fixed, and per split of the
# most-split request: a round trip per eight splits), in keys streamed.
CHUNK_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
LONE_CTA_TIME = 0.85
ROUND_OVERHEAD_TOKENS = 128
MERGE_TOKENS = 64
MERGE_TOKENS_PER_SPLIT = 12
# Runs of entries (plan_work; module docstring): each entry of a CTA's run after its first
# costs this many keys of time (its start and end: the dependent loads of q, the page table
# and the first tiles, the pipeline's drain, the partial write; not hidden by streaming);
# runs replace the chunked plan only when their estimate is below RUNS_MARGIN times its
# estimate (the model is least sure there).
# After the factors' best chunk, the chunks just below it at which one of the longest
# requests gets one more piece are tried too (_breakpoints_below; module docstring): at most
# REFINE_CANDIDATES of them, from the REFINE_SIZES longest distinct request lengths.
REFINE_CANDIDATES = 4
REFINE_SIZES = 4
RUN_ENTRY_TOKENS = 128
RUNS_MARGIN = 0.95
ENV_WORK_RUNS = "AOTINFER_DECODE_WORK_RUNS"
MAX_CLUSTER_SPLITS = 8  # the splits one cluster merges (kMaxClusterSplits in cluster_merge.cuh)
CLUSTER_SLOT_SHARE = 0.75  # of the resident slots that clusters of 3-8 CTAs fill (cluster_room)
MAX_GRID_SPLITS = _u.MAX_GRID_YZ  # a launch's grid.z, which holds a request's splits
MAX_GRID_CTAS = _u.MAX_GRID_X  # a launch's grid.x, which holds requests x KV heads x row blocks
ALIGN = 256  # bytes between carved buffers


@dataclass(frozen=True)
class SplitPlan:
    """How the kernel cuts requests: ``chunk_pages`` pages per split, at most
    ``max_splits`` splits per request (1: no split-KV).

    With a work list (:func:`plan_work`), ``work`` is the ``(items, 4)`` int32 host table of
    (request, partial slot or -1, first page, end page) in launch order, or ``(items,
    entries, 4)`` when each CTA group runs several entries in turn (padded with request -1),
    ``split_counts`` the ``(batch,)`` int32 splits per request, and ``chunk_pages`` the
    largest entry's pages."""

    chunk_pages: int
    max_splits: int
    work: Optional[torch.Tensor] = field(default=None, compare=False)
    split_counts: Optional[torch.Tensor] = field(default=None, compare=False)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(n: int) -> int:
    return _ceil_div(n, ALIGN) * ALIGN


def row_blocks(q_len: int, group: int) -> int:
    """16-row blocks of one KV head's query rows (``q_len`` per request x the GQA group)."""
    return _ceil_div(q_len * group, ROW_BLOCK)


def _piece_count(pages: int, chunk: int, allowed: int) -> int:
    """Pieces of a request of ``pages`` pages cut at ``chunk``: at least 1, at most
    ``allowed`` (what the workspace holds)."""
    n = (pages + chunk - 1) // chunk or 1
    return allowed if n > allowed else n


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
    resident: int = WAVES,
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
    resident : int
        CTAs resident on one multiprocessor (:func:`resident_ctas`).
    """
    max_pages = max(max_pages, 1)
    units = max(batch * num_kv_heads, 1)
    cap = min(max_splits_allowed, max(1, (GRID_CTAS_PER_SM * num_sms) // units))
    slots = resident * num_sms
    chunk = _ceil_div(max(total_pages, 1) * num_kv_heads, slots)
    chunk = max(chunk, _ceil_div(MIN_CHUNK_TOKENS, page_size), _ceil_div(max_pages, cap), 1)
    splits = _ceil_div(max_pages, chunk)
    if splits > 2:

        def cost(s: int) -> int:
            c = _ceil_div(max_pages, s)
            ctas = min(units * s, num_kv_heads * (_ceil_div(total_pages, c) + batch))
            return _ceil_div(ctas, slots) * c

        if cost(splits - 1) <= cost(splits):
            splits -= 1
    if splits <= 1:
        return SplitPlan(chunk_pages=max_pages, max_splits=1)
    return SplitPlan(chunk_pages=_ceil_div(max_pages, splits), max_splits=splits)


def _estimated_time(
    pages: Dict[int, int], chunk: int, units: int, slots: int, page_size: int, allowed: int
) -> float:
    """The work-list cost model of the module docstring for requests of ``pages`` pages
    (page count -> requests) cut at ``chunk``, in pages streamed by one of two CTAs sharing a
    multiprocessor, with ``units`` CTAs per piece and ``slots`` CTAs resident at once. Pure
    Python over the distinct sizes: plan() runs it for every candidate chunk."""
    groups: Dict[int, int] = {}  # piece size -> pieces
    splits = 1
    for p, requests in pages.items():  # (written for speed: this loop is plan()'s cost)
        n = _piece_count(p, chunk, allowed)
        if n > splits:
            splits = n
        size = (p + n - 1) // n
        groups[size] = groups.get(size, 0) + n * requests
    t, rounds, room, work, first = 0.0, 0, 0, 0, 0
    for size, n in sorted(groups.items(), reverse=True):  # largest first, as launched
        left = n * units
        if left < room:  # the common case: the group fits in the current round
            work += left * size
            room -= left
            continue
        while left:
            if room == 0:  # a new round starts with this size
                if rounds:
                    t += max(work / slots, LONE_CTA_TIME * first)
                rounds, room, work, first = rounds + 1, slots, 0, size
            take = min(left, room)
            work, left, room = work + take * size, left - take, room - take
    if rounds:
        t += max(work / slots, LONE_CTA_TIME * first)
    t += rounds * ROUND_OVERHEAD_TOKENS / page_size
    if splits > 1:
        t += (MERGE_TOKENS + MERGE_TOKENS_PER_SPLIT * splits) / page_size
    return t


def _breakpoints_below(sizes: List[int], chunk: int, floor: int) -> List[int]:
    """Chunk sizes in ``[floor, chunk)`` at which a request of one of the ``REFINE_SIZES``
    longest ``sizes`` (pages) first gets one more piece (the largest chunk that cuts ``p``
    pages into more than ``n`` pieces: ``ceil(p / n) - 1``), the ``REFINE_CANDIDATES``
    largest. The factors of ``CHUNK_FACTORS`` step too coarsely for a skewed batch: at 16 x
    1024 skewed they gave chunk 46 (232 CTAs, the longest piece 46 pages) where 42 (256 CTAs,
    still one round; the longest piece 39) is the model's best. Its cost: plan() ~10-70 us
    more on batches of 16 (history/plan-work-host-finer-89ab039.txt)."""
    found = set()
    for p in sorted(set(sizes), reverse=True)[:REFINE_SIZES]:
        n = max(_ceil_div(p, chunk), 1)  # (a request of no pages: n = 1, no candidates)
        for k in range(n, n + REFINE_CANDIDATES):
            c = _ceil_div(p, k) - 1
            if c < floor:
                break
            if c < chunk:
                found.add(c)
    return sorted(found, reverse=True)[:REFINE_CANDIDATES]


def work_runs_mode() -> str:
    """``AOTINFER_DECODE_WORK_RUNS=auto|always|off`` (README switch table): whether plan_work
    gives CTAs runs of entries where the cost model prefers them (``auto``, the default),
    wherever they apply (``always``: tests and A/B runs) or never."""
    value = os.environ.get(ENV_WORK_RUNS, "auto").strip().lower() or "auto"
    if value not in ("auto", "always", "off"):
        raise ValueError(f"{ENV_WORK_RUNS} must be auto, always or off, got {value!r}")
    return value


def _cut_runs(host, target: int, least: int, entry: int) -> List[List[Tuple[int, int, int]]]:
    """Requests of ``host`` pages, in order, cut into runs of lists of (request, first page,
    end page) that each take about ``target`` pages of time, an entry after a run's first
    counting ``entry`` pages more (its start). A run takes the rest of a request when it
    overshoots by at most ``least`` pages, and ends early rather than start a piece shorter
    than ``least`` (a piece that short costs more to start and merge than it streams)."""
    runs, run, room = [], [], target
    for b, p in enumerate(host):
        if p == 0:  # (plan() refuses empty requests; a CTA would write zeros, LSE -inf)
            run.append((b, 0, 0))
            continue
        lo = 0
        while lo < p:
            avail = room - entry if run else room  # a fresh run has target >= least
            left = p - lo
            if left <= avail + least:
                run.append((b, lo, p))
                room, lo = avail - left, p
            elif avail < least:
                room = 0
            else:
                run.append((b, lo, lo + avail))
                lo, room = lo + avail, 0
            if room <= 0:
                runs.append(run)
                run, room = [], target
    if run:
        runs.append(run)
    return runs


def _plan_runs(host, units: int, slots: int, page_size: int, allowed: int):
    """Runs of entries for one wave of CTA groups that take about equal time (module
    docstring), as (estimated time in _estimated_time's units, runs, pieces per request),
    or None where they do not apply: one request, more requests than groups (whole
    requests then balance over the rounds: skewed batches of 64 and 256 ran at 0.98-1.02x
    of uniform), a group wider than half a wave, or a request cut into more pieces than
    the workspace holds."""
    groups = slots // units
    total = sum(host)
    if not 2 <= len(host) <= groups or total == 0:
        return None
    least = _ceil_div(MIN_CHUNK_TOKENS, page_size)
    entry = _ceil_div(RUN_ENTRY_TOKENS, page_size)
    # The smallest target whose runs fit in the wave (one run of everything always does).
    lo, hi = max(_ceil_div(total, groups), least), total + entry * len(host) + least
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_cut_runs(host, mid, least, entry)) <= groups:
            hi = mid
        else:
            lo = mid + 1
    runs = _cut_runs(host, lo, least, entry)
    pieces = Counter(b for run in runs for b, _, _ in run)
    splits = max(pieces.values())
    if splits > allowed:
        return None
    longest = max(sum(hi - lo for _, lo, hi in run) + (len(run) - 1) * entry for run in runs)
    t = longest + ROUND_OVERHEAD_TOKENS / page_size
    if splits > 1:
        t += (MERGE_TOKENS + MERGE_TOKENS_PER_SPLIT * splits) / page_size
    return t, runs, pieces


def _runs_work_list(runs, pieces: Counter, batch: int) -> SplitPlan:
    """The ``(groups, entries, 4)`` work list of ``runs`` (the longest run first, each
    padded with request -1) and its split counts; a request's pieces take slots 0, 1, ...
    in page order, a request in one piece slot -1."""
    entries = max(len(run) for run in runs)
    slot_of, rows = Counter(), []
    for run in sorted(runs, key=lambda r: -sum(hi - lo for _, lo, hi in r)):
        for b, lo, hi in run:
            rows.append((b, -1 if pieces[b] == 1 else slot_of[b], lo, hi))
            slot_of[b] += 1
        rows += [(-1, 0, 0, 0)] * (entries - len(run))
    return SplitPlan(
        chunk_pages=max(max(hi - lo for _, _, lo, hi in rows), 1),
        max_splits=max(pieces.values()),
        work=torch.tensor(rows, dtype=torch.int32).view(len(runs), entries, 4),
        split_counts=torch.tensor([pieces[b] for b in range(batch)], dtype=torch.int32),
    )


def plan_work(
    pages: torch.Tensor,
    *,
    num_kv_heads: int,
    row_blocks: int,
    page_size: int,
    num_sms: int,
    max_splits_allowed: int,
    force_chunk: Optional[int] = None,
    resident: int = WAVES,
) -> SplitPlan:
    """The work-list plan of the module docstring for requests of ``pages`` pages (host
    int tensor), with ``resident`` CTAs on a multiprocessor (:func:`resident_ctas`).
    ``force_chunk`` skips the cost model and the runs (dev/sweep_decode_plan.py measures
    each candidate with it)."""
    host = [int(x) for x in pages.tolist()]
    units = max(num_kv_heads * row_blocks, 1)
    slots = resident * num_sms
    allowed = max(max_splits_allowed, 1)
    max_pages = max(max(host, default=1), 1)
    if force_chunk is None:
        min_chunk = _ceil_div(MIN_CHUNK_TOKENS, page_size)
        fair = _ceil_div(sum(host) * units, slots)
        candidates = {min(max(min_chunk, math.ceil(fair * f)), max_pages) for f in CHUNK_FACTORS}
        candidates = sorted(candidates | {max_pages}, reverse=True)
        hist = Counter(host)

        def estimate(c: int) -> float:
            return _estimated_time(hist, c, units, slots, page_size, allowed)

        # ties keep the larger chunk (fewer CTAs, no merge)
        best = min(((estimate(c), c) for c in candidates), key=lambda tc: tc[0])
        mode, runs = work_runs_mode(), None
        # Runs take at least the fair share of one wave of groups: where the best chunk is
        # already within RUNS_MARGIN of that (uniform batches), their search is skipped.
        floor = _ceil_div(sum(host), max(slots // units, 1)) + ROUND_OVERHEAD_TOKENS / page_size
        if mode == "always" or (mode == "auto" and RUNS_MARGIN * best[0] > floor):
            runs = _plan_runs(host, units, slots, page_size, allowed)
        if runs is not None and (mode == "always" or runs[0] < RUNS_MARGIN * best[0]):
            return _runs_work_list(runs[1], runs[2], len(host))
        # Chunks: the finer candidates below the best, where the requests' CTAs fill at most
        # one round (there the longest piece is the time; larger batches are left as they
        # were, and their plan() does not pay for the search). After the runs' decision,
        # which was fitted against the factors' best.
        if len(host) * units <= slots:
            finer = _breakpoints_below(list(hist), best[1], min_chunk)
            tried = [(estimate(c), c) for c in finer]
            best = min([best] + tried, key=lambda tc: tc[0])
        force_chunk = best[1]
    chunk = max(force_chunk, 1)

    # Request b in n pieces [s * p // n, (s + 1) * p // n), s < n: never empty when p >= n.
    counts, items = [], []
    for b, p in enumerate(host):
        n = _piece_count(p, chunk, allowed)
        counts.append(n)
        if n == 1:
            items.append((p, b, -1, 0, p))
            continue
        lo = 0
        for s in range(n):
            hi = (s + 1) * p // n
            items.append((hi - lo, b, s, lo, hi))
            lo = hi
    # Largest pieces first: the block scheduler starts CTAs in grid order, so the small ones
    # fill the slots the large ones leave and the grid ends on short work.
    items.sort(key=lambda it: -it[0])
    return SplitPlan(
        chunk_pages=max(items[0][0], 1) if items else 1,
        max_splits=max(counts, default=1),
        work=torch.tensor([x for it in items for x in it[1:]], dtype=torch.int32).view(-1, 4),
        split_counts=torch.tensor(counts, dtype=torch.int32),
    )


def cluster_room(splits: int, slots: int) -> int:
    """The CTAs of ``slots`` resident ones that thread-block clusters of ``splits`` CTAs
    may take and still all fit at once: every slot for pairs, ``CLUSTER_SLOT_SHARE`` of
    them for clusters of 3 or more (:func:`uniform_grid` says why)."""
    return slots if splits <= 2 else int(slots * CLUSTER_SLOT_SHARE)


def uniform_grid(
    work: SplitPlan, pages: torch.Tensor, units: int, slots: int
) -> Optional[SplitPlan]:
    """The grid form of a work-list plan whose requests all have the same length, are cut
    into 2..``MAX_CLUSTER_SPLITS`` pieces of ``units`` CTAs each, and whose clusters of
    pieces all fit at once in the ``slots`` resident CTAs (uniform batches of a few long
    requests), or None. The provider merges the splits of such a grid in thread-block
    clusters on sm_90+ (cluster_merge.cuh), where a work list always merges in its grid: the
    last split's CTA merging alone (H100, history/ab-decode-cluster-batch-gated-h100.md: 16/1
    heads at 16 x 1024 0.87x, 64/8 0.93x, 32/8 0.97x).

    A cluster's CTAs share one GPC, and GPCs whose slots are not a multiple of the cluster
    size leave some idle. On an H100 (dev/cluster_occupancy.cu, the occupancy API for the
    kernel's shared memory; history/cluster-occupancy-h100.txt), clusters of 2 fill every
    slot, and of 3..8 CTAs at d128 237 / 248 / 235 / 234 / 224 / 240 of 264, at d256 (one CTA
    an SM) 117 / 120 / 110 / 102 / 105 / 120 of 132, at d64 329-372 of 396: the least is 77%
    (d256, clusters of 6). So clusters of 3 or more are held to ``CLUSTER_SLOT_SHARE`` (3/4)
    of the slots (:func:`cluster_room`); GPC sizes differ between chips, so the provider
    asks the occupancy API itself and merges another way where clusters still do not fit.
    Batches beyond the room keep their work list (their grid form ran 1.00-1.03x of it
    where the clusters did not fit: no gain to take). The grid's pieces are
    ``ceil(p / n)`` pages with a shorter last one, where the work list's differ by at most a
    page (``max_splits`` is recounted, so no split is empty)."""
    splits = work.max_splits
    if work.work is None or work.work.dim() != 2 or not 2 <= splits <= MAX_CLUSTER_SPLITS:
        return None
    if len(pages) * units * splits > cluster_room(splits, slots):
        return None
    lo, hi = torch.aminmax(pages)
    if int(lo) != int(hi):
        return None
    chunk = _ceil_div(int(hi), splits)
    return SplitPlan(chunk_pages=chunk, max_splits=_ceil_div(int(hi), chunk))


def plan_fixed(max_pages: int, chunk_pages: int, max_splits_allowed: int) -> SplitPlan:
    """``fixed_split_size`` given by the user: ``chunk_pages`` pages per split."""
    splits = _ceil_div(max(max_pages, 1), chunk_pages)
    if splits > max_splits_allowed:
        raise ValueError(
            f"fixed_split_size={chunk_pages} pages cuts the longest request ({max_pages} pages) "
            f"into {splits} splits, but the float workspace holds partial results for at most "
            f"{max_splits_allowed}; pass a larger fixed_split_size or a larger workspace"
        )
    if splits > MAX_GRID_SPLITS:
        raise ValueError(
            f"fixed_split_size={chunk_pages} pages cuts the longest request ({max_pages} pages) "
            f"into {splits} splits, but the kernels launch at most {MAX_GRID_SPLITS} per request "
            "(the grid's z dimension); pass a larger fixed_split_size"
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
