"""Paged-KV utilities with FlashInfer's API (``flashinfer.page``).

``append_paged_kv_cache`` runs the provider's kernel on CUDA tensors and the reference on
CPU tensors. ``get_seq_lens`` and ``get_batch_indices_positions`` are a few torch index
operations on the tensors' own device (no host sync, so they can be captured in a CUDA
graph); FlashInfer uses torch and a Triton kernel for them.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _attention_ops as _ops
from . import _attention_utils as _u
from . import _custom_ops, _views
from . import _decode_launch as _launch
from .reference import page as _ref

__all__ = ["append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens"]

_INT_DTYPES = (torch.int32, torch.int64)
_INT32_MAX = 2**31 - 1
_CACHE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, *_u.FP8_DTYPES)


def get_seq_lens(
    kv_indptr: torch.Tensor, kv_last_page_len: torch.Tensor, page_size: int
) -> torch.Tensor:
    """Keys per request of a paged KV cache.

    Parameters
    ----------
    kv_indptr : torch.Tensor
        ``(batch_size + 1,)`` int32 page-table indptr.
    kv_last_page_len : torch.Tensor
        ``(batch_size,)`` int32 keys in each request's last page.
    page_size : int
        Keys per page.

    Returns
    -------
    torch.Tensor
        ``(batch_size,)``: ``max(pages - 1, 0) * page_size + last_page_len``, on the inputs'
        device, in their (promoted) integer dtype.

    Examples
    --------
    >>> aotinfer.get_seq_lens(torch.tensor([0, 3, 4]), torch.tensor([5, 16]), 16)
    tensor([37, 16])

    The shapes, dtypes and devices are checked (FlashInfer's one-liner would broadcast a
    single ``last_page_len`` over the batch); the values are not, which would need a sync.
    """
    _views.check_tensor("kv_indptr", kv_indptr, ndim=1, dtypes=_INT_DTYPES)
    _views.check_tensor(
        "kv_last_page_len", kv_last_page_len, ndim=1, dtypes=_INT_DTYPES, device=kv_indptr.device
    )
    if kv_indptr.numel() == 0:
        raise ValueError("kv_indptr must have batch_size + 1 >= 1 entries, got 0")
    batch = kv_indptr.numel() - 1
    if kv_last_page_len.numel() != batch:
        raise ValueError(
            f"kv_last_page_len must have batch_size = len(kv_indptr) - 1 = {batch} entries, "
            f"got {kv_last_page_len.numel()}"
        )
    page_size = _u.as_int(page_size)
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    return torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size + kv_last_page_len


def get_batch_indices_positions(
    append_indptr: torch.Tensor,
    seq_lens: torch.Tensor,
    nnz: int,
    batch_indices: Optional[torch.Tensor] = None,
    positions: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Request index and position of each appended token (CSR to COO).

    Parameters
    ----------
    append_indptr : torch.Tensor
        ``(batch_size + 1,)`` int32/int64: request b appends tokens
        ``append_indptr[b] .. append_indptr[b+1] - 1``.
    seq_lens : torch.Tensor
        ``(batch_size,)`` keys per request *after* the append (:func:`get_seq_lens`).
    nnz : int
        Number of token slots to fill (normally ``append_indptr[-1]``), below 2**31.
    batch_indices, positions : torch.Tensor, optional
        Preallocated ``(nnz,)`` int32 outputs on the inputs' device.

    Returns
    -------
    (batch_indices, positions) : (torch.Tensor, torch.Tensor)
        ``(nnz,)`` int32 each: token t of request b gets position
        ``seq_lens[b] - n_b + (t - append_indptr[b])``; slots outside
        ``[append_indptr[0], append_indptr[-1])`` get batch index -1 and position 0 (as
        FlashInfer's kernel leaves them).

    Examples
    --------
    >>> indptr = torch.tensor([0, 1, 3, 6, 10], dtype=torch.int32)
    >>> aotinfer.get_batch_indices_positions(indptr, torch.tensor([5, 5, 5, 5]), 10)
    (tensor([0, 1, 1, 2, 2, 2, 3, 3, 3, 3], dtype=torch.int32),
     tensor([4, 3, 4, 2, 3, 4, 1, 2, 3, 4], dtype=torch.int32))
    """
    _views.check_tensor("append_indptr", append_indptr, ndim=1, dtypes=_INT_DTYPES)
    _views.check_tensor(
        "seq_lens", seq_lens, ndim=1, dtypes=_INT_DTYPES, device=append_indptr.device
    )
    nnz = _u.as_int(nnz)
    if isinstance(nnz, bool) or not isinstance(nnz, int) or not 0 <= nnz <= _u.MAX_GRID_X:
        # (int32 outputs; append_paged_kv_cache launches one block per token in grid.x)
        raise ValueError(f"nnz must be an int in [0, 2**31), got {nnz!r}")
    if append_indptr.numel() == 0:
        raise ValueError("append_indptr must have batch_size + 1 >= 1 entries, got 0")
    batch = append_indptr.numel() - 1
    if seq_lens.numel() != batch:
        raise ValueError(
            f"seq_lens must have batch_size = len(append_indptr) - 1 = {batch} entries, got "
            f"{seq_lens.numel()}"
        )
    device = append_indptr.device
    for name, t in (("batch_indices", batch_indices), ("positions", positions)):
        if t is not None:
            _u.check_shape_dtype_device(t, (nnz,), torch.int32, device, name)
    ends = append_indptr[1:].to(torch.int64).contiguous()
    token = torch.arange(nnz, dtype=torch.int64, device=device)
    if batch > 0:
        b = torch.searchsorted(ends, token, right=True)  # the request whose range holds t
        valid = (b < batch) & (token >= append_indptr[0])  # (no sync: a device compare)
        bc = b.clamp(max=batch - 1)
        pos = seq_lens.to(torch.int64)[bc] - ends[bc] + token
        b_out = torch.where(valid, b, torch.full_like(b, -1)).to(torch.int32)
        # (saturated: a position past int32 lands past every page, so append skips it)
        pos_out = torch.where(valid, pos, torch.zeros_like(pos)).clamp(-1, _INT32_MAX)
        pos_out = pos_out.to(torch.int32)
    else:
        b_out = torch.full((nnz,), -1, dtype=torch.int32, device=device)
        pos_out = torch.zeros((nnz,), dtype=torch.int32, device=device)
    if batch_indices is None:
        batch_indices = b_out
    else:
        batch_indices.copy_(b_out)
    if positions is None:
        positions = pos_out
    else:
        positions.copy_(pos_out)
    return batch_indices, positions


def _index_vector(name: str, t, device: torch.device, min_len: int) -> torch.Tensor:
    _views.check_tensor(name, t, ndim=1, dtypes=_INT_DTYPES, device=device)
    if t.numel() < min_len:
        raise ValueError(f"{name} must have at least {min_len} entries, got {t.numel()}")
    if t.dtype != torch.int32:
        # Saturated, not wrapped: an int64 2**32 + 1 would become 1, a slot the caller never
        # named; -1 and 2**31 - 1 are out of every range, so such a token is skipped.
        t = t.clamp(-1, _INT32_MAX).to(torch.int32)
    return t.contiguous()


def append_paged_kv_cache(
    append_key: torch.Tensor,
    append_value: torch.Tensor,
    batch_indices: torch.Tensor,
    positions: torch.Tensor,
    paged_kv_cache,
    kv_indices: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    kv_layout: str = "NHD",
) -> None:
    """Write new keys and values into a paged KV cache, in place.

    Token t goes to request ``b = batch_indices[t]`` at position ``p = positions[t]``: page
    ``kv_indices[kv_indptr[b] + p // page_size]``, slot ``p % page_size``. The page table must
    already include the appended tokens (grow it first). Index values are not checked on the
    host (that would synchronise): a token the table cannot place (batch index outside
    ``[0, batch_size)``, such as the -1 padding slots of :func:`get_batch_indices_positions`,
    a negative position, a position past the request's pages, a page id outside the cache)
    is skipped, never written, on the GPU and on the CPU alike.

    Parameters
    ----------
    append_key, append_value : torch.Tensor
        ``(nnz, num_kv_heads, head_dim)`` in the cache's dtype; any strides with a
        contiguous last dimension.
    batch_indices, positions : torch.Tensor
        ``(nnz,)`` int32 (:func:`get_batch_indices_positions`).
    paged_kv_cache : torch.Tensor or (torch.Tensor, torch.Tensor)
        5-D tensor or ``(k_cache, v_cache)`` tuple (see ``BatchDecodeWithPagedKVCacheWrapper``).
    kv_indices, kv_indptr : torch.Tensor
        The page table, int32.
    kv_last_page_len : torch.Tensor
        ``(batch_size,)`` int32; accepted for compatibility (the positions say where to
        write).
    kv_layout : str
        ``"NHD"`` or ``"HND"``.

    Examples
    --------
    >>> b, p = aotinfer.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    >>> aotinfer.append_paged_kv_cache(k_new, v_new, b, p, paged_kv_cache, kv_indices,
    ...                                kv_indptr, kv_last_page_len)
    """
    if _custom_ops.tracing():
        _ops.append_paged_kv_cache(
            append_key, append_value, batch_indices, positions, *_ops.cache_args(paged_kv_cache),
            kv_indices, kv_indptr, kv_last_page_len, kv_layout,
        )  # fmt: skip
        return
    layout_code = _u.check_kv_layout(kv_layout)
    k_cache, v_cache = _u.unpack_paged_kv_cache(paged_kv_cache, kv_layout)
    _, page_size, heads, dim = _u.cache_geometry(k_cache, kv_layout)
    if page_size < 1:  # (the kernel divides positions by it)
        raise ValueError(
            f"paged_kv_cache must have a page_size >= 1 ({kv_layout}), got {page_size}"
        )
    _views.check_tensor("append_key", append_key, ndim=3)
    _views.check_device_supported("append_key", append_key)
    _views.check_tensor("append_value", append_value, ndim=3)
    device = append_key.device
    nnz = append_key.size(0)
    halves = (("paged_kv_cache (k half)", k_cache), ("paged_kv_cache (v half)", v_cache))
    for name, t in (("append_value", append_value), *halves):
        if t.device != device:
            raise ValueError(f"{name} must be on {device} like append_key, got {t.device}")
    if v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype:
        raise ValueError(
            "the k and v halves of paged_kv_cache must have the same shape and dtype, got "
            f"{tuple(k_cache.shape)} {_u.dtype_name(k_cache.dtype)} and "
            f"{tuple(v_cache.shape)} {_u.dtype_name(v_cache.dtype)}"
        )
    if k_cache.dtype not in _CACHE_DTYPES:
        names = ", ".join(_u.dtype_name(d) for d in _CACHE_DTYPES)
        raise ValueError(
            f"paged_kv_cache dtype {_u.dtype_name(k_cache.dtype)} is not supported; "
            f"append_paged_kv_cache is built for {names}"
        )
    expected = (nnz, heads, dim)
    for name, t in (("append_key", append_key), ("append_value", append_value)):
        if tuple(t.shape) != expected:
            raise ValueError(
                f"{name} must have shape (nnz, num_kv_heads, head_dim) = {expected} to match the "
                f"cache, got {tuple(t.shape)}"
            )
        if t.dtype != k_cache.dtype:
            raise ValueError(
                f"{name} has dtype {_u.dtype_name(t.dtype)} but the cache holds "
                f"{_u.dtype_name(k_cache.dtype)}; convert (quantise) it first"
            )
    batch_indices = _index_vector("batch_indices", batch_indices, device, nnz)[:nnz]
    positions = _index_vector("positions", positions, device, nnz)[:nnz]
    kv_indptr = _index_vector("kv_indptr", kv_indptr, device, 1)
    kv_indices = _index_vector("kv_indices", kv_indices, device, 0)
    _views.check_tensor("kv_last_page_len", kv_last_page_len, ndim=1)
    if nnz == 0:
        return
    if _launch.use_reference(device):
        _launch.reference(
            _ref.append_paged_kv_cache,
            append_key,
            append_value,
            batch_indices,
            positions,
            k_cache,
            v_cache,
            kv_indices,
            kv_indptr,
            kv_layout,
        )
        return
    _u.check_head_dim_contiguous(k_cache, v_cache)
    append_key = append_key if append_key.stride(-1) == 1 else append_key.contiguous()
    append_value = append_value if append_value.stride(-1) == 1 else append_value.contiguous()
    _launch.provider_kernels(device).append_paged_kv_cache(
        _views.view(append_key),
        _views.view(append_value),
        _views.view(batch_indices),
        _views.view(positions),
        _views.view(k_cache),
        _views.view(v_cache),
        layout_code,
        page_size,
        _views.view(kv_indices),
        _views.view(kv_indptr),
        _views.stream_handle(device),
    )
