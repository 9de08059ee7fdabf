"""``BatchDecodeWithPagedKVCacheWrapper`` (and its CUDA-graph variant): plan once per
batch composition on the host, run once per layer on the device.

plan() checks everything it can on the host (it may sync), chooses the split-KV plan
(aotinfer._decode_plan: a work list cut from this page table, or in CUDA-graph mode a
requests x splits grid that serves any page table fitting the buffers), copies the page
table (and the work list) to the device (into the preallocated buffers in CUDA-graph mode)
and carves the split-KV partial buffers out of the float workspace. run() checks its
tensors against the plan without touching the device and makes one provider call; it
allocates nothing but ``out``/``lse`` when they are not given, so it can be captured in a
CUDA graph. A graph captured without ``use_cuda_graph`` holds the plan's device copies: it
replays the batch it was planned for, and a later plan() needs a new capture (as in
FlashInfer); CUDA-graph mode is the one whose graphs survive new page tables.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import torch

from . import _attention_ops as _ops
from . import _attention_utils as _u
from . import _decode_checks as _c
from . import _decode_launch as _launch
from . import _decode_plan as _plan
from . import _views
from ._custom_ops import tracing as _tracing

_BACKENDS_OURS = ("auto", "fa2")
_BACKENDS_FLASHINFER = ("fa3", "trtllm-gen", "cute-dsl", "cudnn")

# Nominal multiprocessor count for plans made on CPU (the reference path ignores splits;
# this only makes CPU plans and workspace_size deterministic). An H100/H200 has 132.
_CPU_NOMINAL_SMS = 132


@dataclass
class _Plan:
    """What plan() fixed for run(): geometry, dtypes, options, the split and the device
    copies of the page table."""

    batch: int
    q_len: int
    rows: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    o_dtype: torch.dtype
    pos_encoding_mode: str
    window_left: int
    logits_soft_cap: Optional[float]
    sm_scale: Optional[float]
    rope_scale: Optional[float]
    rope_theta: Optional[float]
    split: _plan.SplitPlan
    indptr: torch.Tensor
    indices: torch.Tensor
    last_page_len: torch.Tensor
    alibi_slopes: torch.Tensor
    # The table's largest page id; where the table is on the device (page_ids_read False)
    # 0: its ids go unread, but it uses a page, so the cache must hold one.
    max_page_id: int = 0
    page_ids_read: bool = True
    partial_out: Optional[torch.Tensor] = None
    partial_lse: Optional[torch.Tensor] = None
    # Precomputed for run()'s hot path: expected shapes, the scalars without per-call
    # overrides, and (provider path) the kernels module and the views of plan-owned tensors.
    q_shape: Tuple[int, ...] = ()
    cache_tail: Tuple[int, ...] = ()
    default_scalars: Optional[_launch.DecodeScalars] = None
    kernels: object = None
    table_views: tuple = (None, None, None)
    partial_views: tuple = (None, None)
    work: Optional[torch.Tensor] = None  # device copy of split.work then split.split_counts
    # The provider's (work, split_counts, arrivals) views (_plan_work_views): work_views for
    # every call, eager_work_views for an eager call where it differs (a split single
    # request merges in its grid when eager, _eager_merges_in_grid), else None.
    work_views: tuple = (None, None, None)
    eager_work_views: Optional[tuple] = None
    alibi_view: object = None
    # kernels.batch_decode's argument groups (_decode_launch.table_args, split_args,
    # scalar_args of the planned options); eager_split_args: the split group of
    # eager_work_views, or None.
    launch_table: tuple = ()
    launch_split: tuple = ()
    eager_split_args: Optional[tuple] = None
    launch_scalars: tuple = ()
    # The provider's prepared launches of this plan (kernels.prepare_batch_decode), made by
    # the first run() that can use one: keyed by (whether the call is eager, the 5-D cache's
    # strides, whether it passes sinks), since the split group, the cache's strides and the
    # sinks' presence are fixed in them. None: run() never uses them
    # (AOTINFER_DECODE_PREPARED=off at plan()).
    prepared: Optional[dict] = None
    # What run() puts into the views it builds itself: the device index (-1: CPU), the
    # dtype codes of q, out and the cache (and the cache's element size), the contiguous
    # strides of out and lse.
    device_index: int = -1
    q_code: int = 0
    o_code: int = 0
    kv_code: int = 0
    kv_itemsize: int = 0
    out_strides: Tuple[int, ...] = ()
    lse_shape: Tuple[int, ...] = ()
    lse_strides: Tuple[int, ...] = ()


def _merges_in_grid(batch: int) -> bool:
    """Whether a split decode merges inside its grid (the provider's ``arrivals``; a work
    list needs it) rather than in a merge kernel. Not for a single request, whose CTAs all
    finish together: there the merge kernel, resident early under PDL, was sooner (batch 1,
    kv 1024: 10.5 vs 11.8 us, two runs; after both merges began loading eight states per
    round trip, one run, A B A B: 9.1 vs 9.35 us, and kv 16384 27.1 vs 30.0); with more
    requests the in-grid merge overlaps other CTAs' streaming and won (batch 16, kv 1024:
    25.6 vs 27.0 us uniform, 29.9 vs 32.7 skewed; dev/NOTES.md items 22 and 40).

    Either way, on sm_90+ a single request in 2..8 splits is merged by the provider in
    thread-block clusters (decode_launchers.h; batch 1 x 1024 8.8 -> 8.1 us, item 42),
    whichever of the two the core asks for; so is a batch in the grid form whose clusters all
    fit at once (_clusters_merge, _decode_plan.uniform_grid), the in-grid merge its fallback."""
    return batch > 1


def _eager_merges_in_grid(batch: int) -> bool:
    """Whether an eager (not captured) call of a split decode merges in its grid although
    :func:`_merges_in_grid` says the merge kernel. An eager call's time is the host's: the
    merge kernel's launch costs as much host time as the decode's (~4-5 us each on the H200
    host, dev/time_decode_host.py), far more than the in-grid merge costs the GPU (0.25 us at
    batch 1, kv 1024). Inside a CUDA graph there is no launch cost, so captures keep the merge
    kernel. Both merges combine the same partial states in the same order."""
    return batch == 1


def _device_copy(table: torch.Tensor, device: torch.device, non_blocking: bool) -> torch.Tensor:
    """plan()'s own contiguous int32 copy of a page-table tensor on ``device``. Never the
    caller's tensor, which .to() returns where it already is int32 on the device: run()
    must read the table plan() analysed (a caller rewriting its tensor before run(), as a
    loop reusing one buffer does, would otherwise hand the kernels an indptr whose ranges
    the plan never saw: reads past ``indices``), and a strided one would reach the
    launcher as it is."""
    copy = table.to(device, torch.int32, non_blocking=non_blocking)
    if copy is table:
        return table.clone(memory_format=torch.contiguous_format)
    return copy.contiguous()


def _returning_lse(method, return_lse: bool, name: str):
    """``method`` with ``return_lse`` defaulting to ``return_lse``, as FlashInfer's
    ``functools.partialmethod`` aliases (``run_return_lse``, ``forward``...) are, with the
    same signature; but a plain function, which torch.compile traces (it stops at a
    partialmethod's descriptor: "Observed exception" under fullgraph=True)."""

    def alias(self, *args, **kwargs):
        kwargs.setdefault("return_lse", return_lse)
        return method(self, *args, **kwargs)

    functools.update_wrapper(alias, method)
    alias.__name__ = name
    alias.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.{name}"
    signature = inspect.signature(method)
    alias.__signature__ = signature.replace(
        parameters=[
            p.replace(default=return_lse) if p.name == "return_lse" else p
            for p in signature.parameters.values()
        ]
    )
    return alias


class BatchDecodeWithPagedKVCacheWrapper:
    """Batch decode over a paged KV cache: ``plan()`` once per batch composition, then
    ``run()`` once per layer.

    Parameters
    ----------
    float_workspace_buffer : torch.Tensor
        Contiguous, 16-byte aligned, on the device the wrapper serves (its device decides
        CUDA kernels or the CPU reference). Split-KV partial results live here; 128 MiB is
        plenty. Its size bounds how far long requests are split.
    kv_layout : str
        ``"NHD"`` or ``"HND"``, the layout of the paged cache passed to ``run``.
    use_cuda_graph : bool
        Fixed batch size and preallocated page-table buffers, so that ``run`` can be
        captured in a CUDA graph and replayed after ``plan`` copies new page tables in.
    use_tensor_cores : bool
        Allows ``q_len_per_req > 1`` and ``fixed_split_size`` (as in FlashInfer); the same
        kernels run either way.
    paged_kv_indptr_buffer, paged_kv_indices_buffer, paged_kv_last_page_len_buffer : torch.Tensor
        CUDA-graph mode only: int32 ``(batch_size + 1,)``, ``(max_num_pages,)``,
        ``(batch_size,)`` on the wrapper's device.
    backend : str
        ``"auto"`` or ``"fa2"``.
    jit_args : None
        aotinfer has no JIT; anything else is refused.

    Examples
    --------
    >>> ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    >>> wrapper = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    >>> wrapper.plan(kv_indptr, kv_indices, kv_last_page_len, 32, 8, 128, 16,
    ...              q_data_type=torch.bfloat16)
    >>> out = wrapper.run(q, paged_kv_cache)        # q (batch, 32, 128) bfloat16
    """

    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        use_tensor_cores: bool = False,
        paged_kv_indptr_buffer: Optional[torch.Tensor] = None,
        paged_kv_indices_buffer: Optional[torch.Tensor] = None,
        paged_kv_last_page_len_buffer: Optional[torch.Tensor] = None,
        backend: str = "auto",
        jit_args=None,
    ) -> None:
        _u.check_kv_layout(kv_layout)
        if jit_args is not None:
            raise NotImplementedError(
                "jit_args customises JIT-compiled kernels; aotinfer ships prebuilt kernels only"
            )
        if isinstance(backend, str) and backend in _BACKENDS_FLASHINFER:
            raise NotImplementedError(
                f"backend {backend!r} is not available in aotinfer; "
                "BatchDecodeWithPagedKVCacheWrapper supports backend 'auto' and 'fa2' (both run "
                "aotinfer's decode kernels)"
            )
        if not isinstance(backend, str) or backend not in _BACKENDS_OURS:
            raise ValueError(f"backend must be 'auto' or 'fa2', got {backend!r}")
        self._float_workspace_buffer = _u.check_workspace(
            "float_workspace_buffer", float_workspace_buffer
        )
        _views.check_device_supported("float_workspace_buffer", float_workspace_buffer)
        self.device = float_workspace_buffer.device
        # For a run() traced by torch.compile: the op's way back to this wrapper, and the
        # planned output dtype (both read by the traced code, so fixed across re-plans).
        self._op_key = _ops.register_wrapper(self)
        self._traced_o_dtype: Optional[torch.dtype] = None
        self._int_workspace_buffer: Optional[torch.Tensor] = None
        self._arrivals: Optional[torch.Tensor] = None
        self._kv_layout = kv_layout
        self._layout_code = _u.KV_LAYOUTS[kv_layout]
        self._use_tensor_cores = _views.flag("use_tensor_cores", use_tensor_cores)
        self._use_cuda_graph = _views.flag("use_cuda_graph", use_cuda_graph)
        self._backend = backend
        self._plan: Optional[_Plan] = None
        self._fixed_batch_size = 0
        self._paged_kv_indptr_buf = paged_kv_indptr_buffer
        self._paged_kv_indices_buf = paged_kv_indices_buffer
        self._paged_kv_last_page_len_buf = paged_kv_last_page_len_buffer
        if self._use_cuda_graph:
            self._check_graph_buffers()

    def _check_graph_buffers(self) -> None:
        buffers = (
            ("paged_kv_indptr_buffer", self._paged_kv_indptr_buf),
            ("paged_kv_indices_buffer", self._paged_kv_indices_buf),
            ("paged_kv_last_page_len_buffer", self._paged_kv_last_page_len_buf),
        )
        for name, buf in buffers:
            if not isinstance(buf, torch.Tensor):
                raise ValueError(f"{name} should be a torch.Tensor in cudagraph mode")
            _views.check_tensor(name, buf, ndim=1, dtypes=(torch.int32,), device=self.device)
            if not buf.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {tuple(buf.stride())}")
        self._fixed_batch_size = self._paged_kv_last_page_len_buf.numel()
        if self._fixed_batch_size < 1:
            raise ValueError(
                "paged_kv_last_page_len_buffer must hold batch_size >= 1 entries (the batch "
                "is fixed in cudagraph mode), got 0"
            )
        if self._paged_kv_indptr_buf.numel() != self._fixed_batch_size + 1:
            raise ValueError(
                "The size of paged_kv_indptr_buffer should be batch_size + 1 "
                f"(paged_kv_last_page_len_buffer holds batch_size = {self._fixed_batch_size} "
                f"entries; paged_kv_indptr_buffer holds {self._paged_kv_indptr_buf.numel()})"
            )
        if self._paged_kv_indices_buf.numel() < 1:
            raise ValueError(
                "paged_kv_indices_buffer must hold at least one page index, got 0 entries"
            )

    @property
    def use_tensor_cores(self) -> bool:
        return self._use_tensor_cores

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def reset_workspace_buffer(
        self, float_workspace_buffer: torch.Tensor, int_workspace_buffer: torch.Tensor
    ) -> None:
        """Swap in new workspace buffers (same device). A current plan's partial buffers are
        carved again from the new float buffer; if it is too small, call ``plan`` again."""
        _u.check_workspace("float_workspace_buffer", float_workspace_buffer)
        if int_workspace_buffer is not None:
            _u.check_workspace("int_workspace_buffer", int_workspace_buffer)
        if float_workspace_buffer.device != self.device:
            raise ValueError(
                f"float_workspace_buffer must stay on {self.device}, got "
                f"{float_workspace_buffer.device}"
            )
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = int_workspace_buffer
        p = self._plan
        if p is not None and p.split.max_splits > 1:
            need = _plan.partial_bytes(p.rows, p.split.max_splits, p.num_qo_heads, p.head_dim)
            have = float_workspace_buffer.numel() * float_workspace_buffer.element_size()
            if need > have:
                self._plan = None
                raise ValueError(
                    f"the new float_workspace_buffer holds {have} bytes but the current plan "
                    f"needs {need}: the buffers were swapped and the plan dropped; call plan() "
                    "again"
                )
            p.partial_out, p.partial_lse = _plan.carve_partials(
                float_workspace_buffer, p.rows, p.split.max_splits, p.num_qo_heads, p.head_dim
            )
            self._carve_views(p)

    def _arrivals_for(self, n: int) -> torch.Tensor:
        """The split-merge counters of the kernel (decode_launchers.h, ``arrivals``): at least
        ``n`` int32 zeros on the device. Kept across plans, so a captured graph's pointer stays
        valid: the kernel leaves every counter at 0 after each call."""
        if self._arrivals is None or self._arrivals.numel() < n:
            self._arrivals = torch.zeros(max(n, 256), dtype=torch.int32, device=self.device)
        return self._arrivals

    def _workspace_bytes(self) -> int:
        buf = self._float_workspace_buffer
        return buf.numel() * buf.element_size()

    def _num_sms(self) -> int:
        if _launch.use_reference(self.device):
            return _CPU_NOMINAL_SMS
        return _launch.num_sms(self.device)

    def _split(
        self,
        batch,
        rows,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        pages,
        opts,
        workspace_bytes,
    ):
        """The split plan (see aotinfer._decode_plan for the cost models): a work list from
        the page table, or in CUDA-graph mode (and with ``fixed_split_size`` or
        ``disable_split_kv``) the fixed requests x splits grid."""
        if self._use_cuda_graph:
            max_pages = total = self._paged_kv_indices_buf.numel()
        else:
            max_pages, total = int(pages.max()), int(pages.sum())
        if opts["disable_split_kv"]:
            return _plan.SplitPlan(chunk_pages=max_pages, max_splits=1)
        allowed = _plan.splits_that_fit(workspace_bytes, rows, num_qo_heads, head_dim)
        if opts["fixed_split_size"] is not None:
            return _plan.plan_fixed(max_pages, opts["fixed_split_size"], allowed)
        resident = _plan.resident_ctas(head_dim)
        if not self._use_cuda_graph:
            blocks = _plan.row_blocks(rows // max(batch, 1), num_qo_heads // num_kv_heads)
            work = _plan.plan_work(
                pages,
                num_kv_heads=num_kv_heads,
                row_blocks=blocks,
                page_size=page_size,
                num_sms=self._num_sms(),
                max_splits_allowed=allowed,
                resident=resident,
            )
            if not _merges_in_grid(batch):  # the same pieces as grid splits, merge kernel
                return _plan.SplitPlan(chunk_pages=work.chunk_pages, max_splits=work.max_splits)
            if self._clusters_merge():
                slots = resident * self._num_sms()
                return _plan.uniform_grid(work, pages, num_kv_heads * blocks, slots) or work
            return work
        return _plan.plan_splits(
            batch=batch,
            max_pages=max_pages,
            total_pages=total,
            page_size=page_size,
            num_kv_heads=num_kv_heads,
            num_sms=self._num_sms(),
            max_splits_allowed=allowed,
            resident=resident,
        )

    def _clusters_merge(self) -> bool:
        """Whether the provider merges a grid plan's splits in thread-block clusters (sm_90+,
        unless AOTINFER_DECODE_CLUSTER_MERGE=off): then a uniform batch takes the grid form of
        its work list (_decode_plan.uniform_grid)."""
        return _launch.clusters_merge(self.device)

    def plan(
        self,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        last_page_len: torch.Tensor,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        *deprecated_positional_args,
        window_right: int = 0,
        **kwargs,
    ) -> None:
        """Host-side planning for a batch: checks, split-KV plan, page-table copies.

        May synchronise (it reads ``indptr`` and ``last_page_len`` on the host), so it is
        not capturable; call it before capturing or replaying.

        Parameters
        ----------
        indptr : torch.Tensor
            ``(batch_size + 1,)`` int32: request b owns ``indices[indptr[b]:indptr[b+1]]``.
        indices : torch.Tensor
            ``(indptr[-1],)`` int32 page ids, each in ``[0, num_pages)`` of the cache run()
            gets. Checked here (and against the cache in run()) where ``indices`` is a CPU
            tensor; on the device they go unchecked (a check would synchronise every plan)
            and the kernels clamp them into the cache.
        last_page_len : torch.Tensor
            ``(batch_size,)`` int32, each in ``[1, page_size]``; request b holds
            ``page_size * (pages_b - 1) + last_page_len[b]`` keys.
        num_qo_heads, num_kv_heads, head_dim, page_size : int
            Geometry; ``num_qo_heads % num_kv_heads == 0``, each at most 65535; head_dim
            64, 128 or 256.
        **kwargs
            ``pos_encoding_mode="NONE"``, ``window_left=-1``, ``logits_soft_cap=None``,
            ``q_data_type="float16"``, ``kv_data_type=None`` (q's), ``o_data_type=None``
            (q's), ``data_type=None`` (deprecated: fills q/kv types left None),
            ``sm_scale=None`` (``1/sqrt(head_dim)``), ``rope_scale=None`` (1),
            ``rope_theta=None`` (1e4), ``non_blocking=True``, ``block_tables=None`` (ignored:
            the CSR table is authoritative), ``seq_lens=None`` (checked against the table),
            ``fixed_split_size=None`` (pages per split; needs ``use_tensor_cores``),
            ``disable_split_kv=False``, ``q_len_per_req=1`` (> 1 needs
            ``use_tensor_cores``). The same options after ``page_size`` positionally, in
            this order, still work with a DeprecationWarning. ``window_right`` must be 0.
        """
        opts = _c.plan_options(deprecated_positional_args, kwargs)
        opts["window_right"] = window_right
        num_qo_heads, num_kv_heads, head_dim, page_size = map(
            _u.as_int, (num_qo_heads, num_kv_heads, head_dim, page_size)
        )
        q_dtype, kv_dtype, o_dtype, q_len = _c.check_plan_options(
            num_qo_heads, num_kv_heads, head_dim, page_size, opts, self._use_tensor_cores
        )
        indptr_h, last_h, pages, kv_lens, max_page_id = _c.host_page_table(
            indptr, indices, last_page_len, page_size, q_len
        )
        _views.check_device_supported("indices", indices)  # (copied to the device below)
        batch = indptr_h.numel() - 1
        seq_lens = opts["seq_lens"]
        if seq_lens is not None:
            given = _views.check_tensor("seq_lens", seq_lens, ndim=1).to("cpu", torch.int64)
            if given.shape != kv_lens.shape or not torch.equal(given, kv_lens):
                raise ValueError(
                    f"seq_lens {given.tolist()[:8]} does not match the kv lengths of the page "
                    f"table {kv_lens.tolist()[:8]} (page_size * (pages - 1) + last_page_len)"
                )
        used = int(indptr_h[-1])
        if self._use_cuda_graph:
            if batch != self._fixed_batch_size:
                raise ValueError(
                    "The batch size should be fixed in cudagraph mode, the runtime batch size "
                    f"{batch} mismatches the batch size set during initialization "
                    f"{self._fixed_batch_size}"
                )
            if used > self._paged_kv_indices_buf.numel():
                raise ValueError(
                    "The size of indices should be less than or equal to the allocated buffer "
                    f"(the page table uses {used} pages; paged_kv_indices_buffer holds "
                    f"{self._paged_kv_indices_buf.numel()})"
                )
        rows = batch * q_len
        _c.check_grid_fits(batch, num_qo_heads, num_kv_heads, q_len)
        split = self._split(
            batch,
            rows,
            num_qo_heads,
            num_kv_heads,
            head_dim,
            page_size,
            pages,
            opts,
            self._workspace_bytes(),
        )

        non_blocking = opts["non_blocking"]  # (a bool: check_plan_options)
        if self._use_cuda_graph:
            d_indptr, d_indices = self._paged_kv_indptr_buf, self._paged_kv_indices_buf
            d_last = self._paged_kv_last_page_len_buf
            d_indptr.copy_(indptr, non_blocking=non_blocking)
            d_indices[:used].copy_(indices[:used], non_blocking=non_blocking)
            d_last.copy_(last_page_len, non_blocking=non_blocking)
        else:
            d_indptr, d_indices, d_last = (
                _device_copy(t, self.device, non_blocking) for t in (indptr, indices, last_page_len)
            )

        plan = _Plan(
            batch=batch,
            q_len=q_len,
            rows=rows,
            num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
            o_dtype=o_dtype,
            pos_encoding_mode=opts["pos_encoding_mode"],
            window_left=opts["window_left"],
            logits_soft_cap=opts["logits_soft_cap"],
            sm_scale=opts["sm_scale"],
            rope_scale=opts["rope_scale"],
            rope_theta=opts["rope_theta"],
            split=split,
            indptr=d_indptr,
            indices=d_indices,
            last_page_len=d_last,
            alibi_slopes=_c.alibi_slopes(num_qo_heads, self.device),
            max_page_id=max_page_id,
            page_ids_read=indices.device.type == "cpu",
        )
        if split.max_splits > 1:
            plan.partial_out, plan.partial_lse = _plan.carve_partials(
                self._float_workspace_buffer, rows, split.max_splits, num_qo_heads, head_dim
            )
        plan.q_shape = (rows, num_qo_heads, head_dim)
        plan.lse_shape = (rows, num_qo_heads)
        if self._kv_layout == "NHD":
            plan.cache_tail = (2, page_size, num_kv_heads, head_dim)
        else:
            plan.cache_tail = (2, num_kv_heads, page_size, head_dim)
        plan.default_scalars = self._scalars(plan, {}, (None, None, None))
        self._traced_o_dtype = o_dtype
        if not _launch.use_reference(self.device):
            view = _views.view
            plan.kernels = _launch.provider_kernels(self.device)
            plan.table_views = (view(d_indptr), view(d_indices), view(d_last))
            self._plan_work_views(plan, batch, non_blocking)
            plan.alibi_view = view(plan.alibi_slopes)
            self._launch_groups(plan)
            self._carve_views(plan)
        self._plan = plan

    def _plan_work_views(self, p: _Plan, batch: int, non_blocking: bool) -> None:
        """p.work (the work list and split counts on the device), p.work_views and
        p.eager_work_views. A split decode merges in its grid through the arrivals counters
        where a work list needs it or _merges_in_grid says so; an eager call of a split single
        request does too (_eager_merges_in_grid), while its captures keep the merge kernel."""
        view, split = _views.view, p.split
        work_view = counts_view = None
        if split.work is not None:
            n = split.work.numel()
            ints = torch.cat([split.work.view(-1), split.split_counts])
            p.work = ints.to(self.device, non_blocking=non_blocking)
            work_view, counts_view = view(p.work[:n].view(split.work.shape)), view(p.work[n:])
        arrivals = None
        splits_or_work = split.max_splits > 1 or split.work is not None
        if splits_or_work and (_merges_in_grid(batch) or _eager_merges_in_grid(batch)):
            blocks = _plan.row_blocks(p.q_len, p.num_qo_heads // p.num_kv_heads)
            arrivals = view(self._arrivals_for(batch * blocks * p.num_kv_heads))
        every_call = arrivals if split.work is not None or _merges_in_grid(batch) else None
        p.work_views = (work_view, counts_view, every_call)
        p.eager_work_views = None
        if every_call is None and arrivals is not None:
            p.eager_work_views = (work_view, counts_view, arrivals)

    def _launch_groups(self, p: _Plan) -> None:
        """The plan's ready argument groups and view constants for run() (provider path);
        the split groups follow the partial buffers (_carve_views)."""
        p.launch_table = _launch.table_args(self._layout_code, p.page_size, p.table_views, 0)
        p.launch_scalars = _launch.scalar_args(p.default_scalars, p.alibi_view)
        p.device_index = -1 if self.device.index is None else self.device.index  # as get_device()
        p.q_code = _views.DTYPE_CODES[p.q_dtype]
        p.o_code = _views.DTYPE_CODES[p.o_dtype]
        p.kv_code = _views.DTYPE_CODES[p.kv_dtype]
        p.kv_itemsize = p.kv_dtype.itemsize
        _, heads, dim = p.q_shape
        p.out_strides = (heads * dim, dim, 1)
        p.lse_strides = (heads, 1)

    @staticmethod
    def _scalars(p: _Plan, opts: dict, scales: tuple) -> _launch.DecodeScalars:
        return _c.scalars(
            p.head_dim,
            opts.get("pos_encoding_mode", p.pos_encoding_mode),
            opts.get("window_left", p.window_left),
            opts.get("logits_soft_cap", p.logits_soft_cap),
            opts.get("sm_scale", p.sm_scale),
            opts.get("rope_scale", p.rope_scale),
            opts.get("rope_theta", p.rope_theta),
            *scales,
        )

    def _carve_views(self, p: _Plan) -> None:
        """The views of the plan's partial buffers and the split argument groups that hold
        them (plan(), and again after reset_workspace_buffer carves new buffers)."""
        if _launch.use_reference(self.device):
            return
        if p.split.max_splits > 1:
            p.partial_views = (_views.view(p.partial_out), _views.view(p.partial_lse))
        p.launch_split = _launch.split_args(p.partial_views, p.work_views, p.split, p.q_len)
        p.prepared = {} if _launch.prepared_launches_on() else None  # they hold the old views
        if p.eager_work_views is not None:
            p.eager_split_args = _launch.split_args(
                p.partial_views, p.eager_work_views, p.split, p.q_len
            )

    begin_forward = plan

    def workspace_size(
        self,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        last_page_len: torch.Tensor,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        pos_encoding_mode: str = "NONE",
        window_left: int = -1,
        logits_soft_cap: Optional[float] = None,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        data_type=None,
        sm_scale: Optional[float] = None,
        rope_scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        block_tables=None,
        seq_lens=None,
        fixed_split_size: Optional[int] = None,
        disable_split_kv: bool = False,
        q_len_per_req: int = 1,
    ) -> Tuple[int, int]:
        """``(float_bytes, int_bytes)`` this wrapper's ``plan`` would use for these
        arguments if the workspace were unlimited (int_bytes is 0: no int workspace). The
        options are FlashInfer's, in its order (plan()'s without ``non_blocking``), and
        positional after ``page_size`` as there."""
        opts = dict(_c.PLAN_OPTIONS)
        opts.update(
            pos_encoding_mode=pos_encoding_mode, window_left=window_left,
            logits_soft_cap=logits_soft_cap, q_data_type=q_data_type,
            kv_data_type=kv_data_type, o_data_type=o_data_type, data_type=data_type,
            sm_scale=sm_scale, rope_scale=rope_scale, rope_theta=rope_theta,
            block_tables=block_tables, seq_lens=seq_lens, fixed_split_size=fixed_split_size,
            disable_split_kv=disable_split_kv, q_len_per_req=q_len_per_req,
        )  # fmt: skip
        num_qo_heads, num_kv_heads, head_dim, page_size = map(
            _u.as_int, (num_qo_heads, num_kv_heads, head_dim, page_size)
        )
        _, _, _, q_len = _c.check_plan_options(
            num_qo_heads, num_kv_heads, head_dim, page_size, opts, self._use_tensor_cores
        )
        indptr_h, _, pages, _, _ = _c.host_page_table(
            indptr, indices, last_page_len, page_size, q_len
        )
        batch = indptr_h.numel() - 1
        rows = batch * q_len
        _c.check_grid_fits(batch, num_qo_heads, num_kv_heads, q_len)
        split = self._split(
            batch, rows, num_qo_heads, num_kv_heads, head_dim, page_size, pages, opts, 1 << 62
        )
        return _plan.partial_bytes(rows, split.max_splits, num_qo_heads, head_dim), 0

    def run(
        self,
        q: torch.Tensor,
        paged_kv_cache,
        *args,
        q_scale: Optional[float] = None,
        k_scale: Optional[float] = None,
        v_scale: Optional[float] = None,
        out: Optional[torch.Tensor] = None,
        lse: Optional[torch.Tensor] = None,
        return_lse: bool = False,
        enable_pdl: Optional[bool] = None,
        window_left: Optional[int] = None,
        sinks: Optional[torch.Tensor] = None,
        q_len_per_req: Optional[int] = None,
        skip_softmax_threshold_scale_factor: Optional[float] = None,
        kv_cache_sf=None,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Decode attention for the planned batch. Capturable: no host sync, no allocation
        but ``out``/``lse`` when they are not given.

        Parameters
        ----------
        q : torch.Tensor
            ``(batch_size * q_len_per_req, num_qo_heads, head_dim)`` in the planned
            ``q_data_type``; row ``b * q_len_per_req + r`` is query r of request b. Any
            strides with a contiguous last dimension (a slice of a fused QKV projection
            passes as it is; strides that are not multiples of 8 elements cost a copy);
            the first element on a 16-byte boundary (any tensor torch allocates, and
            slices at multiples of 8 elements).
        paged_kv_cache : torch.Tensor or (torch.Tensor, torch.Tensor)
            5-D ``(max_num_pages, 2, page_size, num_kv_heads, head_dim)`` (NHD) / ``(.., 2,
            num_kv_heads, page_size, head_dim)`` (HND), or a ``(k_cache, v_cache)`` tuple of
            the 4-D halves; in the planned ``kv_data_type``.
        q_scale, k_scale : float, optional
            Multiply the logits (fp8 scales); ``v_scale`` multiplies the output.
        out : torch.Tensor, optional
            Contiguous ``(rows, num_qo_heads, head_dim)`` in ``o_data_type``.
        lse : torch.Tensor, optional
            Contiguous ``(rows, num_qo_heads)`` float32; written when given.
        return_lse : bool
            Also return the base-2 LSE (sinks included).
        enable_pdl : bool, optional
            Ignored.
        window_left : int, optional
            None: the planned value; otherwise used for this call.
        sinks : torch.Tensor, optional
            ``(num_qo_heads,)`` float: one extra logit per head in the softmax denominator.
        q_len_per_req : int, optional
            Deprecated here (set it in ``plan``); must match the plan.
        skip_softmax_threshold_scale_factor, kv_cache_sf : None
            Not supported (NVFP4 KV and skip-softmax are trtllm-gen features).

        Returns
        -------
        torch.Tensor or (torch.Tensor, torch.Tensor)
            ``out`` and, with ``return_lse``, ``lse``.
        """
        # The checks that need no plan come first, so that a traced run() makes them too.
        if args:
            raise TypeError(
                f"run() got {len(args)} extra positional argument(s); in FlashInfer they feed "
                "JIT-customised kernels, which aotinfer does not have (pass options by keyword)"
            )
        if return_lse is not True and return_lse is not False:  # (inline: the fast path's cost)
            return_lse = _views.flag("return_lse", return_lse)
        if skip_softmax_threshold_scale_factor is not None:
            raise NotImplementedError("skip_softmax_threshold_scale_factor is not supported")
        if kv_cache_sf is not None:
            raise NotImplementedError("kv_cache_sf (NVFP4 KV cache) is not supported")
        if _tracing():
            return self._run_traced(
                q, paged_kv_cache, q_scale, k_scale, v_scale, out, lse, return_lse,
                window_left, sinks, q_len_per_req,
            )  # fmt: skip
        p = self._plan
        if p is None:
            raise RuntimeError("plan() must be called before run()")
        if q_len_per_req is not None:
            warnings.warn(
                "run(q_len_per_req=...) is deprecated; set it in plan()",
                DeprecationWarning,
                stacklevel=2,
            )
            if q_len_per_req != p.q_len:
                raise ValueError(
                    f"q_len_per_req={q_len_per_req} was passed to run() but plan() used "
                    f"{p.q_len}; re-plan with the matching q_len_per_req."
                )
        scalars = None  # the planned ones
        # (identity tests: a tuple compare runs ==, which a NumPy scale answers elementwise)
        if (
            window_left is not None
            or q_scale is not None
            or k_scale is not None
            or v_scale is not None
        ):
            scalars = _c.call_scalars(p.default_scalars, window_left, q_scale, k_scale, v_scale)
        return self._run(p, q, paged_kv_cache, scalars, out, lse, return_lse, sinks)

    run_return_lse = _returning_lse(run, True, "run_return_lse")

    def _run_traced(
        self, q, paged_kv_cache, q_scale, k_scale, v_scale, out, lse, return_lse, window_left,
        sinks, q_len_per_req,
    ):  # fmt: skip
        """run() inside torch.compile or a dispatch mode: the outputs are allocated here from
        q's shape and the planned dtype, and the op runs the eager run() on them (its checks
        included). Nothing here reads the plan, so a re-plan between calls keeps the graph."""
        if out is None:
            out = q.new_empty(q.shape, dtype=self._traced_o_dtype)
        if lse is None and return_lse:
            lse = q.new_empty(q.shape[:2], dtype=torch.float32)
        _ops.batch_decode(
            q, *_ops.cache_args(paged_kv_cache), out, lse, self._op_key, q_scale, k_scale,
            v_scale, window_left, sinks, q_len_per_req,
        )  # fmt: skip
        return (out, lse) if return_lse else out

    def _run(self, p, q, paged_kv_cache, scalars, out, lse, return_lse, sinks, prepared=True):
        """run() after its own argument checks; ``scalars`` None: the planned ones, else the
        planned ones with this call's scales and window (``prepared`` False: other options
        too, forward()'s, which only the full provider call takes).

        The common case (a 5-D cache, q and out as planned) takes the short path: a few
        attribute comparisons, then views built from the plan's constants and the ready
        argument groups (each torch accessor not called is host time saved on every call:
        the goal is 15 us per eager run()); anything unusual goes through the full checks,
        which raise the precise error.
        """
        dev, index = self.device, p.device_index
        if (
            not isinstance(q, torch.Tensor)
            or q.dtype is not p.q_dtype
            or q.shape != p.q_shape
            or q.device != dev
        ):
            _c.check_q(p, q, dev)
        if sinks is not None:
            sinks = _c.check_sinks(p, sinks, dev)
        if out is None:
            # sizes as separate ints: the tuple form costs torch's parser ~0.4 us more per call
            out = torch.empty(*p.q_shape, dtype=p.o_dtype, device=dev)
        elif not (
            isinstance(out, torch.Tensor)
            and out.dtype is p.o_dtype
            and out.shape == p.q_shape
            and out.device == dev
            and out.is_contiguous()
        ):
            _u.check_shape_dtype_device(out, p.q_shape, p.o_dtype, dev, "out")
            if not out.is_contiguous():
                raise ValueError(f"out must be contiguous, got strides {tuple(out.stride())}")
        if lse is None and return_lse:
            lse = torch.empty(*p.lse_shape, dtype=torch.float32, device=dev)
        elif lse is not None:
            _u.check_shape_dtype_device(lse, p.lse_shape, torch.float32, dev, "lse")
            if not lse.is_contiguous():
                raise ValueError(f"lse must be contiguous, got strides {tuple(lse.stride())}")

        if p.kernels is None:  # CPU tensors: the reference
            k_cache, v_cache = _c.check_cache(p, paged_kv_cache, self._kv_layout, dev)
            _launch.run_reference(
                q,
                k_cache,
                v_cache,
                p.indptr,
                p.indices,
                p.last_page_len,
                kv_layout=self._kv_layout,
                q_len_per_req=p.q_len,
                scalars=p.default_scalars if scalars is None else scalars,
                alibi_slopes=p.alibi_slopes,
                sinks=sinks,
                out=out,
                lse=lse,
            )
            return (out, lse) if return_lse else out

        # Both launch paths: q's strides (a slice of a fused QKV projection passes as it is,
        # a non-contiguous last dimension is copied) and whether the launch is eager (the
        # plan may merge split requests differently when it is not captured).
        # The kernels load q in 16-byte vectors: rows and heads must start 16 bytes apart
        # (strides in multiples of 8 elements: q is 2-byte), else a copy; a fused-QKV slice
        # needs none. (q's own start off 16 bytes is the provider's clear error: asking for
        # the offset too would cost every call 0.1 us for an exotic view.)
        q_strides = q.stride()
        if q_strides[-1] != 1 or (q_strides[0] | q_strides[1]) & 7:
            q = q.contiguous()
            q_strides = q.stride()
        eager = p.eager_split_args is not None and not _launch.capturing()
        cache = paged_kv_cache
        k_view = None
        if isinstance(cache, torch.Tensor) and cache.dtype is p.kv_dtype:
            shape, strides = cache.shape, cache.stride()
            if (
                shape[1:] == p.cache_tail
                and strides[4] == 1
                and shape[0] > p.max_page_id
                and cache.device == dev
            ):
                if prepared and p.prepared is not None:
                    self._launch_prepared(
                        p, q, q_strides, eager, cache, shape, strides, out, lse, scalars, sinks
                    )
                    return (out, lse) if return_lse else out
                _c.check_rows_aligned(
                    _launch.half_strides(strides), strides[1], p.kv_itemsize, "paged_kv_cache"
                )
                k_view, v_view = _launch.cache_half_views(
                    cache.data_ptr(), shape, strides, p.kv_code, p.kv_itemsize, index
                )
        if k_view is None:
            k_cache, v_cache = _c.check_cache(p, cache, self._kv_layout, dev)
            for name, half in (("paged_kv_cache[0]", k_cache), ("paged_kv_cache[1]", v_cache)):
                _c.check_rows_aligned(half.stride(), 0, p.kv_itemsize, name)
            k_view, v_view = _views.view(k_cache), _views.view(v_cache)
        lse_view = None
        if lse is not None:
            lse_view = (lse.data_ptr(), _views.F32_CODE, p.lse_shape, p.lse_strides, index)
        split = p.eager_split_args if eager else p.launch_split
        p.kernels.batch_decode(
            (q.data_ptr(), p.q_code, p.q_shape, q_strides, index),
            k_view,
            v_view,
            *p.launch_table,
            (out.data_ptr(), p.o_code, p.q_shape, p.out_strides, index),
            lse_view,
            *split,
            *(p.launch_scalars if scalars is None else _launch.scalar_args(scalars, p.alibi_view)),
            None if sinks is None else _views.view(sinks),
            _views.stream_handle(dev),
        )
        return (out, lse) if return_lse else out

    def _launch_prepared(
        self, p, q, q_strides, eager, cache, shape, strides, out, lse, scalars, sinks
    ) -> None:
        """run()'s launch through the provider's prepared call for this plan (a 5-D cache of
        the planned tail): only pointers, q's strides and the page count cross into the
        provider, and with per-call scales, window or sinks (checked by run()) those values
        too. The first such call for an eager or captured launch, a cache layout and sinks or
        none prepares it (the provider checks everything once, as batch_decode does on every
        call); anything the provider refuses is raised there."""
        key = (eager, strides, sinks is not None)
        prepared = p.prepared.get(key)
        if prepared is None:
            prepared = self._prepare(p, eager, shape, strides, sinks is not None)
            p.prepared[key] = prepared
        k_ptr = cache.data_ptr()
        pointers = (
            q.data_ptr(),
            q_strides[0],
            q_strides[1],
            k_ptr,
            k_ptr + strides[1] * p.kv_itemsize,
            shape[0],
            out.data_ptr(),
            0 if lse is None else lse.data_ptr(),
        )
        stream = _views.stream_handle(self.device)
        if scalars is None and sinks is None:
            prepared.launch(*pointers, stream)
            return
        s = p.default_scalars if scalars is None else scalars
        sinks_ptr = 0 if sinks is None else sinks.data_ptr()
        prepared.launch_with(
            *pointers, s.sm_scale, s.k_scale, s.v_scale, s.window_left, sinks_ptr, stream
        )

    def _prepare(self, p, eager: bool, shape, strides, sinks: bool):
        """kernels.prepare_batch_decode for run()'s prepared path: q, out, lse (and sinks) as
        the plan fixes them (their pointers are per call), the cache's halves with these
        strides."""
        index = p.device_index
        _c.check_rows_aligned(
            _launch.half_strides(strides), strides[1], p.kv_itemsize, "paged_kv_cache"
        )
        k_view, v_view = _launch.cache_half_views(
            0, shape, strides, p.kv_code, p.kv_itemsize, index
        )
        return p.kernels.prepare_batch_decode(
            (0, p.q_code, p.q_shape, p.out_strides, index),
            k_view,
            v_view,
            *p.launch_table,
            (0, p.o_code, p.q_shape, p.out_strides, index),
            (0, _views.F32_CODE, p.lse_shape, p.lse_strides, index),
            *(p.eager_split_args if eager else p.launch_split),
            *p.launch_scalars,
            (0, _views.F32_CODE, (p.num_qo_heads,), (1,), index) if sinks else None,
        )

    def _forward(
        self,
        q: torch.Tensor,
        paged_kv_cache,
        pos_encoding_mode: str = "NONE",
        q_scale: Optional[float] = None,
        k_scale: Optional[float] = None,
        v_scale: Optional[float] = None,
        window_left: int = -1,
        logits_soft_cap: Optional[float] = None,
        sm_scale: Optional[float] = None,
        rope_scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        *,
        return_lse: bool = False,
    ):
        """Deprecated ``forward``/``forward_return_lse``: ``run`` with these options in place
        of the planned ones, for this call only (FlashInfer's forward() also keeps them for
        later run() calls; here a call's options never change the plan's: re-plan instead).
        Under ``torch.compile`` it is an op of its own, as run() is."""
        options = (
            pos_encoding_mode, q_scale, k_scale, v_scale, window_left, logits_soft_cap,
            sm_scale, rope_scale, rope_theta,
        )  # fmt: skip
        return_lse = _views.flag("return_lse", return_lse)
        if not _tracing():
            return self._forward_into(
                q, paged_kv_cache, None, None, *options, return_lse=return_lse
            )
        out = q.new_empty(q.shape, dtype=self._traced_o_dtype)
        lse = q.new_empty(q.shape[:2], dtype=torch.float32) if return_lse else None
        _ops.batch_decode_forward(
            q, *_ops.cache_args(paged_kv_cache), out, lse, self._op_key, *options
        )  # fmt: skip
        return (out, lse) if return_lse else out

    def _forward_into(
        self, q, paged_kv_cache, out, lse, pos_encoding_mode, q_scale, k_scale, v_scale,
        window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta, return_lse=False,
    ):  # fmt: skip
        """forward() into ``out``/``lse`` where given (the traced op's eager part)."""
        p = self._plan
        if p is None:
            raise RuntimeError("plan() must be called before forward()")
        opts = dict(
            pos_encoding_mode=pos_encoding_mode,
            window_left=window_left,
            logits_soft_cap=logits_soft_cap,
            sm_scale=sm_scale,
            rope_scale=rope_scale,
            rope_theta=rope_theta,
        )
        scalars = self._scalars(p, opts, (q_scale, k_scale, v_scale))
        return self._run(p, q, paged_kv_cache, scalars, out, lse, return_lse, None, False)

    forward = _returning_lse(_forward, False, "forward")
    forward_return_lse = _returning_lse(_forward, True, "forward_return_lse")

    def end_forward(self) -> None:
        """Does nothing (kept for compatibility)."""


class CUDAGraphBatchDecodeWithPagedKVCacheWrapper(BatchDecodeWithPagedKVCacheWrapper):
    """:class:`BatchDecodeWithPagedKVCacheWrapper` with ``use_cuda_graph=True``.

    Parameters
    ----------
    workspace_buffer : torch.Tensor
        The float workspace (see the parent class).
    indptr_buffer, indices_buffer, last_page_len_buffer : torch.Tensor
        int32 ``(batch_size + 1,)``, ``(max_num_pages,)``, ``(batch_size,)``; ``plan``
        copies each batch's page table into them.
    """

    def __init__(
        self,
        workspace_buffer: torch.Tensor,
        indptr_buffer: torch.Tensor,
        indices_buffer: torch.Tensor,
        last_page_len_buffer: torch.Tensor,
        kv_layout: str = "NHD",
        use_tensor_cores: bool = False,
    ) -> None:
        super().__init__(
            workspace_buffer,
            kv_layout,
            use_cuda_graph=True,
            use_tensor_cores=use_tensor_cores,
            paged_kv_indptr_buffer=indptr_buffer,
            paged_kv_indices_buffer=indices_buffer,
            paged_kv_last_page_len_buffer=last_page_len_buffer,
        )
