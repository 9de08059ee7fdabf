"""The split-KV planner's cost model (aotinfer._decode_plan) and the workspace carving."""

from __future__ import annotations

import pytest
import torch

from aotinfer import _decode_plan as dp

SMS = 132  # an H100 / H200


def plan(lens, page_size=16, hkv=8, sms=SMS, allowed=10_000):
    pages = [-(-n // page_size) for n in lens]
    return dp.plan_splits(
        batch=len(lens),
        max_pages=max(pages),
        total_pages=sum(pages),
        page_size=page_size,
        num_kv_heads=hkv,
        num_sms=sms,
        max_splits_allowed=allowed,
    )


def ceil_div(a, b):
    return -(-a // b)


def covers(p, lens, page_size=16):
    """Every request fits in max_splits chunks of chunk_pages pages."""
    return all(ceil_div(ceil_div(n, page_size), p.chunk_pages) <= p.max_splits for n in lens)


@pytest.mark.parametrize("batch, kv", [(64, 4096), (256, 4096), (128, 17), (64, 512)])
def test_full_grids_do_not_split(batch, kv):
    p = plan([kv] * batch)
    assert p.max_splits == 1 and covers(p, [kv] * batch)


@pytest.mark.parametrize("batch, kv", [(1, 1024), (1, 16384), (16, 16384), (4, 4096)])
def test_small_grids_split_to_about_two_waves(batch, kv):
    p = plan([kv] * batch)
    ctas = batch * 8 * p.max_splits
    assert p.max_splits > 1 and covers(p, [kv] * batch)
    assert ctas >= 0.9 * dp.WAVES * SMS or p.chunk_pages * 16 <= 2 * dp.MIN_CHUNK_TOKENS
    assert ctas <= dp.WAVES * SMS + batch * 8 * 2  # not much more than 2 waves


def test_split_count_stops_at_a_wave_boundary():
    # 16 x 16384 tokens, 8 KV heads: 3 splits would be 384 CTAs on 264 slots (two waves of
    # 342-page pieces); 2 splits are 256 CTAs in one wave of 512-page pieces.
    p = plan([16384] * 16)
    assert p.max_splits == 2 and p.chunk_pages == 512


def test_skewed_batch_cuts_the_long_request_into_fair_shares():
    lens = [16384] + [1024] * 63
    p = plan(lens)
    assert covers(p, lens)
    total_pages = sum(n // 16 for n in lens)
    fair = total_pages * 8 / (dp.WAVES * SMS)
    assert p.max_splits > 1 and p.chunk_pages <= 2 * fair
    assert plan([1024] * 64).max_splits == 1  # the same batch without the long one


def test_min_chunk_and_caps():
    min_pages = dp.MIN_CHUNK_TOKENS // 16
    assert plan([16 * min_pages + 1]).max_splits == 2  # one page more than the smallest chunk
    assert plan([16 * min_pages]).max_splits == 1
    p = plan([1 << 20], allowed=5)  # workspace holds 5 splits
    assert p.max_splits <= 5 and covers(p, [1 << 20])
    p = plan([1 << 14] * 128, sms=SMS)  # grid cap: B*Hkv*splits <= 32 CTAs per SM
    assert 128 * 8 * p.max_splits <= dp.GRID_CTAS_PER_SM * SMS or p.max_splits == 1


def test_graph_mode_plan_covers_any_table():
    # CUDA-graph mode plans with total = max = the indices buffer's length.
    for max_num_pages in (1, 100, 4096, 1 << 16):
        p = dp.plan_splits(
            batch=8,
            max_pages=max_num_pages,
            total_pages=max_num_pages,
            page_size=16,
            num_kv_heads=8,
            num_sms=SMS,
            max_splits_allowed=64,
        )
        assert p.chunk_pages * p.max_splits >= max_num_pages


def test_plan_fixed():
    assert dp.plan_fixed(100, 8, 20) == dp.SplitPlan(8, 13)
    with pytest.raises(ValueError, match="fixed_split_size=1 pages"):
        dp.plan_fixed(100, 1, 20)


def test_workspace_accounting_and_carving():
    rows, hq, d = 7, 32, 128
    for s in (2, 3, 17):
        need = dp.partial_bytes(rows, s, hq, d)
        assert dp.splits_that_fit(need, rows, hq, d) == s
        assert dp.splits_that_fit(need - 1, rows, hq, d) == s - 1
    assert dp.partial_bytes(rows, 1, hq, d) == 0
    ws = torch.zeros(dp.partial_bytes(rows, 5, hq, d), dtype=torch.uint8)
    po, pl = dp.carve_partials(ws, rows, 5, hq, d)
    assert po.shape == (rows, 5, hq, d) and pl.shape == (rows, 5, hq)
    assert po.dtype == pl.dtype == torch.float32 and po.is_contiguous() and pl.is_contiguous()
    end_out = po.data_ptr() + po.numel() * 4
    assert pl.data_ptr() >= end_out and (pl.data_ptr() - ws.data_ptr()) % dp.ALIGN == 0
    assert pl.data_ptr() + pl.numel() * 4 <= ws.data_ptr() + ws.numel()
    po.fill_(1.0)
    pl.fill_(2.0)
    assert ws.view(torch.float32)[: po.numel()].eq(1.0).all()


# ---------------------------------------------------------------- work-list plans


def work_plan(lens, page_size=16, hkv=8, row_blocks=1, allowed=10_000, **kw):
    pages = torch.tensor([-(-n // page_size) for n in lens])
    return pages, dp.plan_work(
        pages,
        num_kv_heads=hkv,
        row_blocks=row_blocks,
        page_size=page_size,
        num_sms=SMS,
        max_splits_allowed=allowed,
        **kw,
    )


def run_entries(p):
    """The runs of a work list (one entry each for an (items, 4) list), padding dropped."""
    assert p.work.dtype == torch.int32 and p.work.shape[-1] == 4 and p.work.is_contiguous()
    if p.work.dim() == 2:
        return [[e] for e in p.work.tolist()]
    assert p.work.dim() == 3
    runs = []
    for run in p.work.tolist():
        n = next((i for i, e in enumerate(run) if e[0] < 0), len(run))
        assert n >= 1 and all(e == [-1, 0, 0, 0] for e in run[n:])
        runs.append(run[:n])
    return runs


def check_work(pages, p):
    """Each request's pages are cut into split_counts[b] contiguous, non-empty pieces that
    cover it exactly, slot -1 alone or slots 0..n-1; largest pieces (or runs) first."""
    runs = run_entries(p)
    work = [e for run in runs for e in run]
    sizes = [sum(hi - lo for _, _, lo, hi in run) for run in runs]
    assert sizes == sorted(sizes, reverse=True)
    assert p.chunk_pages == max(max(hi - lo for _, _, lo, hi in work), 1)
    counts = p.split_counts.tolist()
    assert p.max_splits == max(counts)
    for b, n in enumerate(pages.tolist()):
        mine = sorted((lo, hi, slot) for rb, slot, lo, hi in work if rb == b)
        assert len(mine) == counts[b] >= 1
        if counts[b] == 1:
            assert mine == [(0, n, -1)]
            continue
        assert sorted(slot for _, _, slot in mine) == list(range(counts[b]))
        assert mine[0][0] == 0 and mine[-1][1] == n
        assert all(a[1] == c[0] for a, c in zip(mine, mine[1:]))
        assert all(hi > lo for lo, hi, _ in mine)


@pytest.mark.parametrize(
    "lens",
    [
        [1024],
        [16384] * 16,
        [4096] * 64,
        [1024] * 256,
        [4096] + [819] * 15,
        [16384] + [3900] * 63,
        [1, 17, 300, 5000, 2048],
        [0, 16, 4096],
    ],
)
def test_work_lists_cover_every_page_once(lens):
    pages, p = work_plan(lens)
    check_work(pages, p)


@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 1 << 20])
def test_forced_chunks_cover_every_page_once(chunk):
    pages, p = work_plan([5000, 1, 16, 17, 300, 2048, 33, 700], force_chunk=chunk)
    check_work(pages, p)
    assert p.chunk_pages <= max(chunk, 1) or p.max_splits == 1


def test_work_list_splits_no_more_than_the_workspace_holds():
    pages, p = work_plan([16384, 16], allowed=3, force_chunk=8)
    check_work(pages, p)
    assert p.max_splits == 3


def test_work_list_choices():
    # batch 1, kv 1024: eight splits of 128 keys (the measured best, module docstring)
    assert work_plan([1024])[1].max_splits == 8
    # full grids stay unsplit and need no merge
    for lens in ([4096] * 64, [1024] * 256):
        assert work_plan(lens)[1].max_splits == 1
    # 16 x 16384: two splits (256 CTAs in one round) rather than three (two rounds)
    assert work_plan([16384] * 16)[1].max_splits == 2
    # a long request among short ones is cut smaller than its fair share of one round
    pages, p = work_plan([4096] + [819] * 15)
    assert p.split_counts[0] > 1 and p.chunk_pages < 256


# bench_decode's 16 x 1024 skewed lengths (seeded as there): one 4x request, 15 others
SKEWED_16x1024 = [
    4096,
    443,
    905,
    479,
    1196,
    871,
    621,
    730,
    299,
    1223,
    785,
    1204,
    1233,
    727,
    435,
    1137,
]


def test_finer_chunks_shorten_the_longest_piece_within_one_round():
    # The factors' best is 48 pages (29 pieces = 232 CTAs, the longest 46 pages); just below
    # it, 42 cuts the 4x request into one piece more: 32 pieces = 256 CTAs, still one round
    # of 264, the longest 39 pages (the cost model: 50.4 against 55.6 pages).
    pages, p = work_plan(SKEWED_16x1024)
    check_work(pages, p)
    assert p.work.shape[0] * 8 <= 264 and p.chunk_pages == 39 and p.split_counts[0] == 7


def test_finer_chunks_only_where_the_requests_fill_at_most_one_round(monkeypatch):
    # 64 requests x 8 heads > 264: the factors' choice stands, refinement or not.
    lens = [16384] + [3900] * 63
    plain = work_plan(lens)[1]
    monkeypatch.setattr(dp, "REFINE_CANDIDATES", 0)
    assert work_plan(lens)[1] == plain
    monkeypatch.undo()
    monkeypatch.setattr(dp, "REFINE_CANDIDATES", 0)  # and without it, 16 x 1024 as before
    assert work_plan(SKEWED_16x1024)[1].chunk_pages == 46


def test_breakpoints_below_are_the_largest_chunks_with_one_piece_more():
    # 256 pages: 6 pieces at chunk 48; 42 gives 7, 36 gives 8, 31 gives 9, 28 gives 10
    assert dp._breakpoints_below([256], 48, 8) == [42, 36, 31, 28]
    for c in dp._breakpoints_below([256, 78, 77], 48, 8):
        assert c < 48 and c >= 8
    assert dp._breakpoints_below([256], 48, 40) == [42]  # none below the floor
    assert dp._breakpoints_below([10], 48, 8) == [9]  # 10 pages: two pieces from chunk 9 down
    assert dp._breakpoints_below([10], 48, 10) == []  # but not at or above the floor


# ---------------------------------------------------------------- runs of entries

SKEWED_16x4096 = [16384] + [3277] * 14 + [3262]  # bench_decode's shape: one 4x request


@pytest.mark.parametrize(
    "lens",
    [
        SKEWED_16x4096,
        [16384] * 16,
        [4096] + [819] * 15,
        [1, 17, 300, 5000, 2048],
        [0, 16, 4096, 0],
        [65536, 16],
    ],
)
def test_runs_cover_every_page_once(monkeypatch, lens):
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "always")
    pages, p = work_plan(lens)
    check_work(pages, p)
    assert p.work.dim() == 3
    groups = 2 * SMS // 8  # one wave of 8-CTA groups
    assert p.work.shape[0] <= groups


def test_runs_balance_a_skewed_batch_in_one_wave(monkeypatch):
    """16 x 4096 with one 4x request: the chunked plan (pieces end at request ends) needs a
    second wave or CTAs of 1.4x the fair share; runs give every group about the fair share
    in one wave."""
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "always")
    pages, p = work_plan(SKEWED_16x4096)
    groups = 2 * SMS // 8
    fair = sum(pages.tolist()) / groups
    least = dp.MIN_CHUNK_TOKENS // 16
    entry = dp.RUN_ENTRY_TOKENS // 16
    runs = run_entries(p)
    loads = [sum(hi - lo for _, _, lo, hi in run) + entry * (len(run) - 1) for run in runs]
    assert max(loads) <= 1.1 * fair + least
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "off")
    _, chunked = work_plan(SKEWED_16x4096)
    assert chunked.work.dim() == 2
    assert chunked.work.shape[0] > groups or chunked.chunk_pages > 1.4 * fair


def test_runs_where_the_cost_model_prefers_them():
    pages, p = work_plan(SKEWED_16x4096)
    assert p.work.dim() == 3
    pages, p = work_plan([65536] + [16384] * 15)  # 16 x 16384 skewed-like
    assert p.work.dim() == 3
    # uniform batches and full grids keep the chunked list (equal pieces already)
    for lens in ([4096] * 16, [16384] * 16, [4096] * 64, [1024] * 256, [1024]):
        assert work_plan(lens)[1].work.dim() == 2


def test_runs_skip_what_they_cannot_serve(monkeypatch):
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "always")
    # one request: the grid splits serve it (and its merge choices)
    assert work_plan([1024])[1].work.dim() == 2
    # more pieces of a request than the workspace holds
    pages, p = work_plan(SKEWED_16x4096, allowed=3)
    check_work(pages, p)
    assert p.work.dim() == 2 and p.max_splits <= 3
    # a forced chunk is what the sweeps time: never runs
    assert work_plan(SKEWED_16x4096, force_chunk=64)[1].work.dim() == 2


def test_cut_runs_never_starts_a_piece_shorter_than_least():
    runs = dp._cut_runs([100, 3, 100, 50], target=60, least=8, entry=4)
    flat = [e for run in runs for e in run]
    # the short request stays whole; no other piece is shorter than least
    assert all(hi - lo >= 8 or (lo, hi) == (0, 3) for _, lo, hi in flat)
    # every request's pieces tile it exactly once
    for b, n in enumerate([100, 3, 100, 50]):
        mine = sorted((lo, hi) for rb, lo, hi in flat if rb == b)
        assert mine[0][0] == 0 and mine[-1][1] == n
        assert all(x[1] == y[0] for x, y in zip(mine, mine[1:]))
    # a run's time (pages, and 4 more per entry after its first) is at most target + least
    assert all(sum(hi - lo for _, lo, hi in run) + 4 * (len(run) - 1) <= 60 + 8 for run in runs)


@pytest.mark.parametrize("value", ["", "auto", "ALWAYS", " off "])
def test_work_runs_switch_values(monkeypatch, value):
    monkeypatch.setenv(dp.ENV_WORK_RUNS, value)
    expected = value.strip().lower() or "auto"
    assert dp.work_runs_mode() == expected
    pages, p = work_plan(SKEWED_16x4096)
    assert (p.work.dim() == 3) == (expected != "off")


def test_work_runs_switch_rejects_other_values(monkeypatch):
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "yes")
    message = "AOTINFER_DECODE_WORK_RUNS must be auto, always or off, got 'yes'"
    with pytest.raises(ValueError, match=message):
        work_plan(SKEWED_16x4096)


def test_fixed_split_size_within_the_grids_z_dimension():
    """A request's splits are grid.z of the launch (at most 65535): a fixed_split_size that
    cuts more is refused at plan time, not at launch (cudaErrorInvalidConfiguration)."""
    assert dp.plan_fixed(65535, 1, 10**6).max_splits == 65535
    with pytest.raises(ValueError, match="into 65536 splits, but the kernels launch at most 65535"):
        dp.plan_fixed(65536, 1, 10**6)


def test_resident_ctas_by_head_dim():
    # The tensor-core kernel's shared memory fits 3 / 2 / 1 CTAs an SM at d64 / d128 / d256.
    assert [dp.resident_ctas(d) for d in (64, 128, 256)] == [3, 2, 1]
    assert dp.resident_ctas(96) == dp.WAVES  # a head dim the table does not list


def test_rounds_hold_the_resident_ctas():
    # 16/8 heads at d256 (one CTA an SM), 16 x 1024: one round of 132 slots holds the 128
    # unsplit CTAs, so the plan does not split into 256 (two rounds there); with the d128
    # figure (264 slots) it split them.
    pages = torch.full((16,), 64, dtype=torch.int32)
    kw = dict(num_kv_heads=8, row_blocks=1, page_size=16, num_sms=SMS, max_splits_allowed=64)
    assert dp.plan_work(pages, resident=1, **kw).max_splits == 1
    assert dp.plan_work(pages, resident=2, **kw).max_splits == 2
    # The grid plan too: 1 x 4096 at 16 KV heads takes half the splits at one CTA an SM.
    grid = dict(batch=1, max_pages=256, total_pages=256, page_size=16, num_kv_heads=16)
    one = dp.plan_splits(num_sms=SMS, max_splits_allowed=64, resident=1, **grid)
    two = dp.plan_splits(num_sms=SMS, max_splits_allowed=64, resident=2, **grid)
    assert one.max_splits * 16 <= SMS < two.max_splits * 16


@pytest.mark.parametrize("batch, hkv, splits", [(16, 8, 1), (1, 16, 8)])
def test_wrapper_plans_d256_with_one_resident_cta(batch, hkv, splits, monkeypatch):
    # Gemma-3's 16/8 heads at d256: 16 x 1024 plans for one CTA an SM (128 unsplit CTAs,
    # one round); Gemma-7B's 16/16 at 1 x 4096 likewise: 8 splits, 128 CTAs (with d128's two
    # it took 16 splits, 256 CTAs in two rounds: 35.7 against 31.7 us on an H100,
    # history/sweep-decode-batch1-gated-79a5c19-h100.txt).
    import aotinfer

    kv = 4096 if batch == 1 else 1024
    pages = kv // 16
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(64 << 20, dtype=torch.uint8))
    monkeypatch.setattr(w, "_num_sms", lambda: SMS)
    indptr = torch.arange(batch + 1, dtype=torch.int32) * pages
    indices = torch.arange(batch * pages, dtype=torch.int32)
    last = torch.full((batch,), 16, dtype=torch.int32)
    w.plan(indptr, indices, last, 16, hkv, 256, 16, q_data_type=torch.bfloat16)
    assert w._plan.split.max_splits == splits


@pytest.mark.parametrize(
    "pages, force, splits, chunk",
    [
        ([64] * 16, 8, 8, 8),  # 16/1 heads, 16 x 1024: eight pieces of 8 pages
        ([63] * 5, 16, 4, 16),  # pieces of 16, 16, 16, 15 pages
        ([10] * 3, 3, 4, 3),  # 3, 3, 3 and 1 pages
        ([1024] * 2, 512, 2, 512),
        ([64] * 128, 32, 2, 32),  # 32/8 heads at 16 x 1024 (units of 8): 256 CTAs
    ],
)
def test_uniform_grid_of_a_uniform_batch(pages, force, splits, chunk):
    kw = dict(num_kv_heads=1, row_blocks=1, page_size=16, num_sms=SMS, max_splits_allowed=64)
    host = torch.tensor(pages, dtype=torch.int32)
    work = dp.plan_work(host, force_chunk=force, **kw)
    grid = dp.uniform_grid(work, host, units=1, slots=2 * SMS)
    assert grid.work is None and (grid.max_splits, grid.chunk_pages) == (splits, chunk)
    # no split is empty, and the splits cover every page
    assert (grid.max_splits - 1) * grid.chunk_pages < pages[0] <= grid.max_splits * grid.chunk_pages


def test_uniform_grid_declines_what_clusters_cannot_merge(monkeypatch):
    kw = dict(num_kv_heads=1, row_blocks=1, page_size=16, num_sms=SMS, max_splits_allowed=64)

    def grid(pages, **extra):
        host = torch.tensor(pages, dtype=torch.int32)
        return dp.uniform_grid(dp.plan_work(host, **dict(kw, **extra)), host, 1, 2 * SMS)

    assert grid([64, 64, 63], force_chunk=8) is None  # lengths differ
    assert grid([64] * 4, force_chunk=64) is None  # one piece each: nothing to merge
    assert grid([64] * 4, force_chunk=4) is None  # 16 pieces: beyond a portable cluster
    # clusters of 8 fill 3/4 of the 264 slots (198 CTAs): 24 x 8 fit, 25 x 8 do not; clusters
    # of 2 fill them all (132 x 2)
    assert grid([64] * 24, force_chunk=8) is not None
    assert grid([64] * 25, force_chunk=8) is None
    assert grid([64] * 132, force_chunk=32) is not None
    assert grid([64] * 133, force_chunk=32) is None
    monkeypatch.setenv(dp.ENV_WORK_RUNS, "always")
    assert grid([64] * 4) is None  # runs of entries (a 3-D work list)
    # a plan without a work list (CUDA-graph mode's grid) is not a work list to convert
    grid_plan = dp.SplitPlan(chunk_pages=8, max_splits=8)
    assert dp.uniform_grid(grid_plan, torch.tensor([64, 64]), 1, 2 * SMS) is None


def test_cluster_room_takes_every_slot_for_pairs_and_a_share_for_larger_clusters():
    assert dp.cluster_room(2, 264) == 264
    assert dp.cluster_room(3, 264) == dp.cluster_room(8, 264) == int(264 * dp.CLUSTER_SLOT_SHARE)


@pytest.mark.parametrize(
    "kv, hkv, d, splits",
    [
        (4096, 16, 256, 8),  # Gemma-7B 16/16: 128 CTAs, one CTA an SM (16 with d128's two)
        (4096, 8, 256, 16),  # Gemma-3 16/8 (32 with d128's two)
        (4096, 8, 128, 32),  # the goals' 32/8 at d128: as before
    ],
)
def test_single_decode_plans_for_the_kernels_resident_ctas(kv, hkv, d, splits):
    from aotinfer import decode

    plan = decode._single_split.__wrapped__(kv, hkv, d, SMS)
    assert plan.max_splits == splits
    assert (plan.max_splits - 1) * plan.chunk_pages < kv <= plan.max_splits * plan.chunk_pages


def test_clusters_merge_needs_a_cuda_sm90_device_and_the_switch_on(monkeypatch):
    from aotinfer import _decode_launch as launch

    cuda = torch.device("cuda", 0)
    assert not launch.clusters_merge(torch.device("cpu"))
    monkeypatch.setattr(launch, "cc_major", lambda device: 9)
    assert launch.clusters_merge(cuda)
    monkeypatch.setenv(launch.ENV_CLUSTER_MERGE, "off")
    assert not launch.clusters_merge(cuda)
    monkeypatch.setenv(launch.ENV_CLUSTER_MERGE, "sometimes")
    with pytest.raises(ValueError, match="AOTINFER_DECODE_CLUSTER_MERGE must be on or off"):
        launch.clusters_merge(cuda)
    monkeypatch.setattr(launch, "cc_major", lambda device: 8)  # (sm_80: the switch is not read)
    assert not launch.clusters_merge(cuda)
