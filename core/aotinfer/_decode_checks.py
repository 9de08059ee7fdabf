"""Argument checks and option handling of the decode API, shared by single decode and the
batch wrapper: run-time scalars, plan() option parsing (legacy positional order), the
host-side page-table checks of plan(), and run()'s checks against the plan.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Tuple

import torch

from . import _attention_utils as _u
from . import _decode_launch as _launch
from . import _decode_plan as _plan
from . import _views

# plan()'s options after page_size, in the legacy positional order, with their defaults.
PLAN_OPTIONS = (
    ("pos_encoding_mode", "NONE"),
    ("window_left", -1),
    ("logits_soft_cap", None),
    ("q_data_type", "float16"),
    ("kv_data_type", None),
    ("o_data_type", None),
    ("data_type", None),
    ("sm_scale", None),
    ("rope_scale", None),
    ("rope_theta", None),
    ("non_blocking", True),
    ("block_tables", None),
    ("seq_lens", None),
    ("fixed_split_size", None),
    ("disable_split_kv", False),
    ("q_len_per_req", 1),
)
_PLAN_NAME = "BatchDecodeWithPagedKVCacheWrapper.plan()"


def scalars(
    head_dim: int,
    pos_encoding_mode: str,
    window_left: int,
    logits_soft_cap,
    sm_scale,
    rope_scale,
    rope_theta,
    q_scale,
    k_scale,
    v_scale,
) -> _launch.DecodeScalars:
    """The kernel's run-time scalars from the API's options (checked; defaults filled)."""
    pos_code = _u.check_pos_encoding_mode(pos_encoding_mode)
    base = (
        1.0 / math.sqrt(head_dim)
        if sm_scale is None
        else _u.positive_float("sm_scale", sm_scale, 1.0)
    )
    return _launch.DecodeScalars(
        sm_scale=base * _u.scale_value("q_scale", q_scale),
        logits_soft_cap=_u.soft_cap_value(logits_soft_cap),
        window_left=_u.check_window_left(window_left),
        pos_code=pos_code,
        rope_scale=_u.positive_float("rope_scale", rope_scale, 1.0),
        rope_theta=_u.positive_float("rope_theta", rope_theta, 1e4),
        k_scale=_u.scale_value("k_scale", k_scale),
        v_scale=_u.scale_value("v_scale", v_scale),
    )


def call_scalars(
    planned: _launch.DecodeScalars, window_left, q_scale, k_scale, v_scale
) -> _launch.DecodeScalars:
    """The planned scalars with one run()'s window and scales, each checked as scalars()
    checks it; the planned options are not checked again (host time of every run() that
    passes fp8 scales: 2.8 -> 1.8 and 3.3 -> 2.8 us in two runs on the CI machine's CPU,
    dev/time_decode_checks.py). The same values as scalars() with the planned options: the
    planned sm_scale has q_scale 1."""
    return _launch.DecodeScalars(
        planned.sm_scale * _u.scale_value("q_scale", q_scale),
        planned.logits_soft_cap,
        planned.window_left if window_left is None else _u.check_window_left(window_left),
        planned.pos_code,
        planned.rope_scale,
        planned.rope_theta,
        _u.scale_value("k_scale", k_scale),
        _u.scale_value("v_scale", v_scale),
    )


_slopes_cache = {}


def alibi_slopes(num_qo_heads: int, device: torch.device) -> torch.Tensor:
    """``(Hq,)`` float32 slopes on ``device``, built once per (heads, device)."""
    key = (num_qo_heads, str(device))
    t = _slopes_cache.get(key)
    if t is None:
        t = _u.get_alibi_slopes(num_qo_heads).to(device)
        _slopes_cache[key] = t
    return t


def plan_options(positional: tuple, kwargs: dict, method: str = _PLAN_NAME) -> dict:
    """Merge legacy positional options and keywords into one dict with defaults (``method``:
    the caller's name, for the messages)."""
    names = [n for n, _ in PLAN_OPTIONS]
    if len(positional) > len(names):
        raise TypeError(
            f"{method} accepts at most {len(names)} deprecated optional positional "
            f"arguments after page_size; got {len(positional)}"
        )
    for key in kwargs:
        if key not in names:
            raise TypeError(f"{method} got an unexpected keyword argument '{key}'")
    opts = dict(PLAN_OPTIONS)
    if positional:
        warnings.warn(
            f"Passing optional arguments to {_PLAN_NAME} positionally is deprecated; pass "
            f"them by keyword ({', '.join(names[: len(positional)])}).",
            DeprecationWarning,
            stacklevel=3,
        )
        for name, value in zip(names, positional):
            if name in kwargs:
                raise TypeError(f"{_PLAN_NAME} got multiple values for argument '{name}'")
            opts[name] = value
    opts.update(kwargs)
    return opts


def _int_vector(name: str, t) -> torch.Tensor:
    _views.check_tensor(name, t, ndim=1)
    if t.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be int32 (or int64), got {_u.dtype_name(t.dtype)}")
    return t


def host_page_table(indptr, indices, last_page_len, page_size: int, q_len: int):
    """Checks the page table on host copies (may sync).

    Page ids are checked (``0 <= id < 2**31``) only where ``indices`` is a CPU tensor: on the
    device that would be one more synchronisation in every plan(), which would stall a
    serving loop that plans step t+1 while the GPU runs step t. Ids on the device go
    unchecked, and the decode kernels clamp them into the cache (a bad id reads a wrong
    page, never outside the cache).

    Returns
    -------
    (indptr, last_page_len, pages, kv_lens, max_page_id)
        int64 CPU tensors: ``(B+1,)``, ``(B,)``, pages and keys per request; the largest
        page id the table uses, or 0 where ``indices`` is on the device (unchecked).
    """
    _int_vector("indptr", indptr)
    _int_vector("indices", indices)
    _int_vector("last_page_len", last_page_len)
    for name, t in (("indptr", indptr), ("last_page_len", last_page_len)):
        _views.check_device_supported(name, t)  # (read here: a meta tensor holds no values)
    indptr_h = indptr.to("cpu", torch.int64)
    last_h = last_page_len.to("cpu", torch.int64)
    batch = indptr_h.numel() - 1
    if batch < 1:
        raise ValueError(f"indptr must have batch_size + 1 >= 2 entries, got {indptr_h.numel()}")
    if last_h.numel() != batch:
        raise ValueError(
            f"last_page_len must have batch_size = len(indptr) - 1 = {batch} entries, got "
            f"{last_h.numel()}"
        )
    if int(indptr_h[0]) != 0:
        raise ValueError(f"indptr[0] must be 0, got {int(indptr_h[0])}")
    pages = indptr_h[1:] - indptr_h[:-1]
    if bool((pages < 1).any()):
        b = int(torch.nonzero(pages < 1)[0])
        raise ValueError(
            f"request {b} has {int(pages[b])} pages (indptr[{b}]={int(indptr_h[b])}, "
            f"indptr[{b + 1}]={int(indptr_h[b + 1])}); indptr must increase and every request "
            "needs at least one page"
        )
    if int(indptr_h[-1]) > indices.numel():
        raise ValueError(
            f"indptr[-1] = {int(indptr_h[-1])} pages but indices has only {indices.numel()} entries"
        )
    # A table on the device is not read, but every request has a page: the cache must hold
    # at least page 0 for the kernels' clamp of an id into [0, num_pages) to land in it.
    max_page_id = 0
    if indices.device.type == "cpu" and int(indptr_h[-1]) > 0:
        used = indices[: int(indptr_h[-1])]
        low, high = (int(v) for v in torch.aminmax(used))
        if low < 0 or high >= 1 << 31:
            bad_id = low if low < 0 else high
            at = int(torch.nonzero(used == bad_id)[0])
            raise ValueError(
                f"indices must hold page ids in [0, 2**31), got {bad_id} at indices[{at}]"
            )
        max_page_id = high
    bad = (last_h < 1) | (last_h > page_size)
    if bool(bad.any()):
        b = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"last_page_len must be in [1, page_size={page_size}], got {int(last_h[b])} for "
            f"request {b}"
        )
    kv_lens = (pages - 1) * page_size + last_h
    if q_len > 1 and bool((kv_lens < q_len).any()):
        b = int(torch.nonzero(kv_lens < q_len)[0])
        raise ValueError(
            f"request {b} has kv_len {int(kv_lens[b])} < q_len_per_req {q_len}; every query "
            "row needs its own key in the cache"
        )
    return indptr_h, last_h, pages, kv_lens, max_page_id


def check_grid_fits(batch: int, num_qo_heads: int, num_kv_heads: int, q_len: int) -> None:
    """The provider refuses a grid wider than one launch holds at run(); refused here, it is
    refused before plan()'s cost model walks that many CTAs (and on the CPU path too)."""
    blocks = _plan.row_blocks(q_len, num_qo_heads // num_kv_heads)
    ctas = batch * num_kv_heads * blocks
    if ctas > _plan.MAX_GRID_CTAS:
        raise ValueError(
            f"batch_size {batch} x num_kv_heads {num_kv_heads} x {blocks} blocks of 16 query "
            f"rows = {ctas} CTAs, more than one launch holds ({_plan.MAX_GRID_CTAS}); plan "
            "the batch in parts"
        )


def check_plan_options(num_qo_heads, num_kv_heads, head_dim, page_size, opts, use_tensor_cores):
    """Checks plan()'s geometry and options; returns ``(q_dtype, kv_dtype, o_dtype, q_len)``."""
    if opts.get("window_right", 0) != 0:
        raise NotImplementedError(
            "window_right is not supported: aotinfer's decode kernels take window_left "
            "only (FlashInfer supports window_right on the cute-dsl backend)"
        )
    _u.check_heads(num_qo_heads, num_kv_heads)
    _u.check_head_dim(head_dim)
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    q_dt, kv_dt = opts["q_data_type"], opts["kv_data_type"]
    if opts["data_type"] is not None:  # fills only what is None (FlashInfer's rule)
        q_dt = opts["data_type"] if q_dt is None else q_dt
        kv_dt = opts["data_type"] if kv_dt is None else kv_dt
    q_dtype = _u.resolve_dtype("q_data_type", q_dt)
    kv_dtype = q_dtype if kv_dt is None else _u.resolve_dtype("kv_data_type", kv_dt)
    o_dtype = (
        q_dtype
        if opts["o_data_type"] is None
        else _u.resolve_dtype("o_data_type", opts["o_data_type"])
    )
    _u.check_q_dtype(q_dtype, "q_data_type")
    if kv_dtype != q_dtype and kv_dtype not in _u.FP8_DTYPES:
        hint = ""
        if opts["data_type"] is not None and opts["kv_data_type"] is None:
            hint = (
                " (data_type sets only kv_data_type, because q_data_type defaults to "
                "float16; pass q_data_type too)"
            )
        raise ValueError(
            f"kv_data_type must be q_data_type ({_u.dtype_name(q_dtype)}) or float8_e4m3fn "
            f"/ float8_e5m2, got {_u.dtype_name(kv_dtype)}{hint}"
        )
    if o_dtype != q_dtype:
        raise ValueError(
            f"o_data_type must equal q_data_type ({_u.dtype_name(q_dtype)}): aotinfer's "
            f"decode kernels write the output in q's dtype; got {_u.dtype_name(o_dtype)}"
        )
    for name in ("disable_split_kv", "non_blocking"):
        opts[name] = _views.flag(name, opts[name])
    q_len = opts["q_len_per_req"]
    if isinstance(q_len, bool) or not isinstance(q_len, int) or q_len < 1:
        raise ValueError(f"q_len_per_req must be an int >= 1, got {q_len!r}")
    if q_len > 1 and not use_tensor_cores:
        raise ValueError(
            "q_len_per_req > 1 requires tensor-core decode (use_tensor_cores=True or the "
            "trtllm-gen/cute-dsl backend)."
        )
    fixed = opts["fixed_split_size"]
    if fixed is not None:
        if not use_tensor_cores:
            raise ValueError("fixed_split_size is only supported by tensor core decode for now.")
        if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1:
            raise ValueError(f"fixed_split_size must be a positive int (pages), got {fixed!r}")
    # Checked now so that run() cannot fail on them later.
    scalars(
        head_dim,
        opts["pos_encoding_mode"],
        opts["window_left"],
        opts["logits_soft_cap"],
        opts["sm_scale"],
        opts["rope_scale"],
        opts["rope_theta"],
        None,
        None,
        None,
    )
    return q_dtype, kv_dtype, o_dtype, q_len


def check_q(p, q, device: torch.device) -> None:
    """q against the plan (dtype text as FlashInfer)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(
            f"q must be a 3-D tensor (batch_size * q_len_per_req, num_qo_heads, head_dim), "
            f"got {shape}"
        )
    if q.device != device:
        raise ValueError(f"q must be on the wrapper's device {device}, got {q.device}")
    if q.dtype != p.q_dtype:
        raise ValueError(
            f"The dtype of q {q.dtype} does not match the q_data_type {p.q_dtype} specified "
            "in plan function."
        )
    rows, heads, dim = q.shape
    if heads != p.num_qo_heads:
        raise ValueError(f"q has {heads} heads but plan() used num_qo_heads={p.num_qo_heads}")
    if dim != p.head_dim:
        raise ValueError(f"q has head_dim {dim} but plan() used head_dim={p.head_dim}")
    if rows != p.rows:
        if rows > 0 and rows % p.batch == 0:
            raise ValueError(
                f"q implies q_len_per_req={rows // p.batch} but plan() used {p.q_len}; "
                "re-plan with the matching q_len_per_req."
            )
        raise ValueError(
            f"q has {rows} rows but plan() was for batch_size {p.batch} x q_len_per_req "
            f"{p.q_len} = {p.rows} rows"
        )


def strides_keep_rows_aligned(strides: tuple, itemsize: int) -> bool:
    """Whether every stride but the last is a multiple of 16 bytes (the decode kernels read
    rows of the last dimension in 16-byte vectors)."""
    step = 16 // itemsize
    return not any(s % step for s in strides[:-1])


def check_rows_aligned(half_strides: tuple, v_offset: int, itemsize: int, what: str) -> None:
    """The decode kernels read the cache in 16-byte rows: every stride of a 4-D half but the
    last, and (a 5-D cache) the v half's offset from the k half, must be a multiple of 16
    bytes. The provider path only; unlike q, a cache is not copied per call (it is the
    whole KV memory), so it is refused here, naming the strides, before the provider's
    shorter message."""
    step = 16 // itemsize
    if not strides_keep_rows_aligned(half_strides, itemsize) or v_offset % step:
        raise ValueError(
            f"{what} must have every stride but the last a multiple of 16 bytes ({step} "
            f"elements of {itemsize} byte(s)): the decode kernels read 16-byte rows; got "
            f"strides {tuple(half_strides)}"
            + (f" and the v half {v_offset} elements after the k half" if v_offset else "")
        )


def check_cache(
    p, paged_kv_cache, kv_layout: str, device: torch.device
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The paged cache against the plan; returns its 4-D halves."""
    k_cache, v_cache = _u.unpack_paged_kv_cache(paged_kv_cache, kv_layout)
    _, page_size, heads, dim = _u.cache_geometry(k_cache, kv_layout)
    if k_cache.dtype != p.kv_dtype:
        raise ValueError(
            f"The dtype of k {k_cache.dtype} does not match the kv_data_type {p.kv_dtype} "
            "specified in plan function."
        )
    if v_cache.dtype != k_cache.dtype or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"the v cache must have the k cache's shape and dtype {tuple(k_cache.shape)} "
            f"{_u.dtype_name(k_cache.dtype)}, got {tuple(v_cache.shape)} "
            f"{_u.dtype_name(v_cache.dtype)}"
        )
    if k_cache.device != device or v_cache.device != device:
        raise ValueError(
            f"paged_kv_cache must be on the wrapper's device {device}, got {k_cache.device}"
        )
    if page_size != p.page_size:
        raise ValueError(
            f"paged_kv_cache has page_size {page_size} ({kv_layout}) but plan() used "
            f"page_size={p.page_size}"
        )
    if heads != p.num_kv_heads:
        raise ValueError(
            f"paged_kv_cache has {heads} KV heads ({kv_layout}) but plan() used "
            f"num_kv_heads={p.num_kv_heads}"
        )
    if dim != p.head_dim:
        raise ValueError(f"paged_kv_cache has head_dim {dim} but plan() used head_dim={p.head_dim}")
    if k_cache.size(0) <= p.max_page_id:
        raise ValueError(
            f"paged_kv_cache has {k_cache.size(0)} pages but the page table of plan() uses "
            + (
                f"page id {p.max_page_id}"
                if p.page_ids_read
                else "pages (its ids, on the device, go unread)"
            )
        )
    _u.check_head_dim_contiguous(k_cache, v_cache)
    return k_cache, v_cache


def check_sinks(p, sinks, device: torch.device) -> Optional[torch.Tensor]:
    """``(Hq,)`` float sinks as contiguous float32 (copied only if needed)."""
    if sinks is None:
        return None
    if (
        type(sinks) is torch.Tensor
        and sinks.dtype is torch.float32
        and sinks.shape == (p.num_qo_heads,)
        and sinks.device == device
        and sinks.is_contiguous()
    ):
        return sinks  # what a model passes on every call (2.8-4.2 -> 0.7 us on the CI CPU)
    _views.check_tensor("sinks", sinks, ndim=1, device=device)
    if sinks.numel() != p.num_qo_heads or not sinks.is_floating_point():
        raise ValueError(
            f"sinks must be a float tensor of shape ({p.num_qo_heads},) (one logit per "
            f"query head), got {_u.dtype_name(sinks.dtype)} {tuple(sinks.shape)}"
        )
    return sinks.to(torch.float32).contiguous()
