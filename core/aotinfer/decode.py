"""Decode attention with FlashInfer's API (``flashinfer.decode``): one query token per
request (or a few, ``q_len_per_req``) attending to a request's whole KV cache.

CUDA tensors run the provider's ``batch_decode`` kernel (providers/csrc/attention/
decode_launchers.h); CPU tensors run the reference (``aotinfer.reference.attention``). Every
argument is checked here, before any launch.

Differences from FlashInfer, by design:

- ``backend`` accepts ``"auto"`` and ``"fa2"``, which both run aotinfer's decode kernels;
  ``use_tensor_cores`` is accepted and changes nothing but what it gates in the API
  (``q_len_per_req > 1`` and ``fixed_split_size``): the provider picks the kernel from the
  data. KV in q's dtype (fp16/bf16) or fp8 without in-kernel RoPE runs on tensor cores on
  sm_80+ (providers/csrc/attention/decode_tc_kernel.cuh; fp8 is converted to f16 in shared
  memory, exactly, and its PV product takes the probabilities in f16, as FlashInfer's does,
  where fp16/bf16 KV gets them to ~16 bits); ``ROPE_LLAMA`` and sm_75 run on CUDA cores
  (decode_kernel.cuh). Both
  give the same results within the tolerances of tests/gpu/test_decode.py, which runs both.
- Head dims 64, 128 and 256; q in float16 or bfloat16; KV in q's dtype, float8_e4m3fn or
  float8_e5m2; the output is in q's dtype (``o_data_type`` must equal ``q_data_type``).
  Head dim 256 needs 84 KB of shared memory per block (fp16/bf16 KV): on a GPU that allows
  less (sm_75: 64 KB) the provider refuses it with a ValueError naming both figures.
- Every request needs at least one page (``kv_len >= q_len_per_req``), checked by ``plan``.
- ``run(window_left=...)`` may differ from the planned value (it is a run-time argument of
  the kernel, so no re-plan is needed). ``sinks`` work with every backend value.
- ``enable_pdl`` is accepted and ignored.
"""

from __future__ import annotations

import functools
from typing import Optional, Tuple, Union

import torch

from . import _attention_ops as _ops
from . import _attention_utils as _u
from . import _custom_ops, _views
from . import _decode_checks as _c
from . import _decode_launch as _launch
from . import _decode_plan as _plan
from ._decode_wrapper import (
    BatchDecodeWithPagedKVCacheWrapper,
    CUDAGraphBatchDecodeWithPagedKVCacheWrapper,
)
from .reference import attention as _ref

__all__ = [
    "single_decode_with_kv_cache",
    "BatchDecodeWithPagedKVCacheWrapper",
    "CUDAGraphBatchDecodeWithPagedKVCacheWrapper",
]

# Single decode has no user workspace: its partial buffers are allocated per call, capped.
_SINGLE_MAX_SPLITS = 256
_SINGLE_CHUNK_KEYS = 64  # four warps x 16-key tiles (decode_tc_kernel.cuh)


def single_decode_with_kv_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_layout: str = "NHD",
    pos_encoding_mode: str = "NONE",
    use_tensor_cores: bool = False,
    q_scale: Optional[float] = None,
    k_scale: Optional[float] = None,
    v_scale: Optional[float] = None,
    window_left: int = -1,
    logits_soft_cap: Optional[float] = None,
    sm_scale: Optional[float] = None,
    rope_scale: Optional[float] = None,
    rope_theta: Optional[float] = None,
    return_lse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Decode attention of one query token over one request's contiguous K/V.

    Parameters
    ----------
    q : torch.Tensor
        ``(num_qo_heads, head_dim)`` float16 or bfloat16; a contiguous last dimension and
        heads that start on 16 bytes is best (otherwise q is copied).
    k, v : torch.Tensor
        ``(kv_len, num_kv_heads, head_dim)`` for ``kv_layout="NHD"`` or ``(num_kv_heads,
        kv_len, head_dim)`` for ``"HND"``; q's dtype, float8_e4m3fn or float8_e5m2 (both the
        same). ``num_qo_heads`` must be a multiple of ``num_kv_heads`` (grouped-query
        attention: query head h reads KV head ``h // (num_qo_heads // num_kv_heads)``), both
        at most 65535. ``head_dim`` is 64, 128 or 256.
    kv_layout : str
        ``"NHD"`` or ``"HND"``.
    pos_encoding_mode : str
        ``"NONE"``, ``"ROPE_LLAMA"`` (Llama rotary embedding applied to q at position
        ``kv_len - 1`` and to key j at position j, inside the kernel) or ``"ALIBI"``.
    use_tensor_cores : bool
        Accepted for compatibility; the same kernel runs either way.
    q_scale, k_scale : float, optional
        Multiply the logits (fp8 calibration scales); default 1.
    v_scale : float, optional
        Multiplies the output; default 1.
    window_left : int
        Attend only the last ``window_left + 1`` keys; -1 (default) attends all.
    logits_soft_cap : float, optional
        ``s = cap * tanh(s / cap)`` on the scaled logits; None or 0 turns it off.
    sm_scale : float, optional
        Logit scale, default ``1 / sqrt(head_dim)``.
    rope_scale, rope_theta : float, optional
        RoPE interpolation scale (default 1) and base (default 1e4).
    return_lse : bool
        Also return the base-2 log-sum-exp of the logits.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``out (num_qo_heads, head_dim)`` in q's dtype and, with ``return_lse``, ``lse
        (num_qo_heads,)`` float32.

    Examples
    --------
    >>> q = torch.randn(32, 128, dtype=torch.float16, device="cuda")
    >>> k = torch.randn(2048, 8, 128, dtype=torch.float16, device="cuda")
    >>> v = torch.randn(2048, 8, 128, dtype=torch.float16, device="cuda")
    >>> out = aotinfer.single_decode_with_kv_cache(q, k, v)
    """
    return_lse = _views.flag("return_lse", return_lse)
    if _custom_ops.tracing():
        out, lse = _ops.single_decode(
            q, k, v, kv_layout, pos_encoding_mode, use_tensor_cores, q_scale, k_scale, v_scale,
            window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta,
        )  # fmt: skip
        return (out, lse) if return_lse else out
    _u.check_kv_layout(kv_layout)
    _u.check_pos_encoding_mode(pos_encoding_mode)
    _views.check_tensor("q", q, ndim=2)
    _views.check_tensor("k", k, ndim=3)
    _views.check_tensor("v", v, ndim=3)
    _views.check_device_supported("q", q)
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} must be on {q.device} like q, got {t.device}")
    _u.check_q_dtype(q.dtype, "q")
    _u.check_kv_dtype(k.dtype, q.dtype, "k")
    if v.dtype != k.dtype or v.shape != k.shape:
        raise ValueError(
            f"v must have k's shape and dtype {tuple(k.shape)} {_u.dtype_name(k.dtype)}, got "
            f"{tuple(v.shape)} {_u.dtype_name(v.dtype)}"
        )
    num_qo_heads, head_dim = q.shape
    if kv_layout == "NHD":
        kv_len, num_kv_heads, k_dim = k.shape
    else:
        num_kv_heads, kv_len, k_dim = k.shape
    _u.check_head_dim(head_dim, "q's head_dim")
    if k_dim != head_dim:
        raise ValueError(f"k has head_dim {k_dim} but q has head_dim {head_dim}")
    _u.check_heads(num_qo_heads, num_kv_heads)
    if kv_len < 1:
        raise ValueError(f"k and v must hold at least one key, got kv_len {kv_len}")
    scalars = _c.scalars(
        head_dim,
        pos_encoding_mode,
        window_left,
        logits_soft_cap,
        sm_scale,
        rope_scale,
        rope_theta,
        q_scale,
        k_scale,
        v_scale,
    )
    device = q.device
    slopes = _c.alibi_slopes(num_qo_heads, device) if scalars.pos_code == 2 else None

    if _launch.use_reference(device):
        params = _launch.reference_params(scalars, slopes, None)
        o, s = _launch.reference(_ref.single_decode, q, k, v, kv_layout=kv_layout, **params)
        out = o.to(q.dtype)
        return (out, s.to(torch.float32)) if return_lse else out

    out = torch.empty(num_qo_heads, head_dim, dtype=q.dtype, device=device)  # ints: see run()
    lse = torch.empty(num_qo_heads, dtype=torch.float32, device=device) if return_lse else None
    # The kernels read q, k and v in 16-byte rows: anything else is copied (a clone, since
    # contiguous() keeps a contiguous view whose start is off a 16-byte boundary).
    q, k, v = (
        t if _rows_aligned(t) else t.clone(memory_format=torch.contiguous_format) for t in (q, k, v)
    )
    _single_decode_cuda(q, k, v, kv_layout, kv_len, num_kv_heads, scalars, slopes, out, lse)
    return (out, lse) if return_lse else out


def _rows_aligned(t: torch.Tensor) -> bool:
    """Whether every row of ``t`` (its last dimension) starts on a 16-byte boundary."""
    strides = t.stride()
    if strides[-1] != 1 or t.data_ptr() % 16:
        return False
    return _c.strides_keep_rows_aligned(strides, t.element_size())


def _single_decode_cuda(q, k, v, kv_layout, kv_len, num_kv_heads, scalars, slopes, out, lse):
    """Single decode as a one-request batch over ``k[None]`` without a page table. With
    split-KV (the planner counts keys, as pages of one key) the keys are cut into chunks of
    whole rounds of the CTA's four 16-key warp tiles, so every warp of a split ends together,
    and a merge kernel combines the splits (on sm_90+, 2..8 splits merge in thread-block
    clusters instead: decode_launchers.h). No page table means no page ids on the kernel's
    critical path: measured against the identity page table it replaced (H200, one machine
    start, A B A B), 32768 keys 49.5 -> 47.3 us, 131072 keys 141.2 -> 138.5 us.

    Host time: the views of the batch of one are built from each tensor's own (a leading
    dimension of 1, no unsqueeze), the split plan is remembered per shape, and the partial
    buffers are one allocation."""
    kernels = _launch.provider_kernels(q.device)
    num_qo_heads, head_dim = q.shape
    index = q.get_device()
    split = _single_split(kv_len, num_kv_heads, head_dim, _launch.num_sms(q.device))
    partial_views = (None, None)
    if split.max_splits > 1:
        splits = split.max_splits
        n_out = splits * num_qo_heads * head_dim
        buf = torch.empty(n_out + splits * num_qo_heads, dtype=torch.float32, device=q.device)
        # partial_out, then partial_lse (16-byte aligned: D % 4 == 0)
        ptr, f32, hd = buf.data_ptr(), _views.F32_CODE, num_qo_heads * head_dim
        o_shape, o_strides = (1, splits, num_qo_heads, head_dim), (n_out, hd, head_dim, 1)
        s_shape, s_strides = (1, splits, num_qo_heads), (splits * num_qo_heads, num_qo_heads, 1)
        partial_views = (
            (ptr, f32, o_shape, o_strides, index),
            (ptr + 4 * n_out, f32, s_shape, s_strides, index),
        )
    _launch.call_batch_decode(
        kernels,
        _batch_of_one(q, index),
        _batch_of_one(k, index),
        _batch_of_one(v, index),
        _u.KV_LAYOUTS[kv_layout],
        kv_len,
        (None, None, None),
        kv_len,
        _batch_of_one(out, index),
        None if lse is None else _batch_of_one(lse, index),
        partial_views,
        (None, None, None),
        split,
        1,
        scalars,
        None if slopes is None else _views.view(slopes),
        None,
        _views.stream_handle(q.device),
    )


def _batch_of_one(t: torch.Tensor, index: int) -> tuple:
    """The provider view of ``t.unsqueeze(0)``, from ``t``'s own pointer, shape and strides."""
    shape, strides = t.shape, t.stride()
    return (
        t.data_ptr(),
        _views.DTYPE_CODES[t.dtype],
        (1, *shape),
        (shape[0] * strides[0], *strides),
        index,
    )


@functools.lru_cache(maxsize=256)
def _single_split(kv_len: int, num_kv_heads: int, head_dim: int, num_sms: int) -> _plan.SplitPlan:
    """The split of one request of ``kv_len`` keys, for the kernel's resident CTAs at
    ``head_dim`` (remembered: the planner's cost model costs microseconds of host time per
    call)."""
    split = _plan.plan_splits(
        batch=1,
        max_pages=kv_len,
        total_pages=kv_len,
        page_size=1,
        num_kv_heads=num_kv_heads,
        num_sms=num_sms,
        max_splits_allowed=_SINGLE_MAX_SPLITS,
        resident=_plan.resident_ctas(head_dim),
    )
    if split.max_splits > 1:  # (rounding the chunk up may leave a single split)
        chunk = -(-split.chunk_pages // _SINGLE_CHUNK_KEYS) * _SINGLE_CHUNK_KEYS
        split = _plan.SplitPlan(chunk_pages=chunk, max_splits=-(-kv_len // chunk))
    return split
