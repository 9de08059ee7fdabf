"""Reference paged-KV utilities, written as plain loops over requests and tokens.

Token t of an append goes to request ``batch_indices[t]`` at position ``positions[t]``:
page ``kv_indices[kv_indptr[b] + pos // page_size]``, slot ``pos % page_size``.
"""

from __future__ import annotations

from typing import Tuple

import torch


def get_seq_lens(
    kv_indptr: torch.Tensor, kv_last_page_len: torch.Tensor, page_size: int
) -> torch.Tensor:
    """``(B,)`` int64 keys per request: ``max(pages - 1, 0) * page_size + last_page_len``."""
    indptr = kv_indptr.cpu().tolist()
    last = kv_last_page_len.cpu().tolist()
    lens = [max(indptr[b + 1] - indptr[b] - 1, 0) * page_size + last[b] for b in range(len(last))]
    return torch.tensor(lens, dtype=torch.int64)


def get_batch_indices_positions(
    append_indptr: torch.Tensor, seq_lens: torch.Tensor, nnz: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(batch_indices, positions)``, ``(nnz,)`` int32 each.

    The ``append_indptr[b+1] - append_indptr[b]`` new tokens of request b take positions
    ``seq_lens[b] - n_b .. seq_lens[b] - 1``; slots past ``append_indptr[-1]`` get batch
    index -1 and position 0.
    """
    indptr = append_indptr.cpu().tolist()
    lens = seq_lens.cpu().tolist()
    batch = [-1] * nnz
    pos = [0] * nnz
    for b in range(len(indptr) - 1):
        n = indptr[b + 1] - indptr[b]
        for i in range(n):
            t = indptr[b] + i
            if t < nnz:
                batch[t] = b
                pos[t] = lens[b] - n + i
    return torch.tensor(batch, dtype=torch.int32), torch.tensor(pos, dtype=torch.int32)


def append_paged_kv_cache(
    append_key: torch.Tensor,
    append_value: torch.Tensor,
    batch_indices: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_layout: str = "NHD",
) -> None:
    """Write ``append_key/value (nnz, Hkv, D)`` into the 4-D cache halves in place.

    As the kernel (append_kv.cuh), a token the page table cannot place is skipped, never
    written: batch index outside ``[0, batch)`` (the -1 padding slots of
    get_batch_indices_positions), a negative position, a position past the request's
    pages, or a page id outside the cache."""
    page_size = k_cache.size(1) if kv_layout == "NHD" else k_cache.size(2)
    num_pages = k_cache.size(0)
    indices = kv_indices.cpu().tolist()
    indptr = kv_indptr.cpu().tolist()
    batch = batch_indices.cpu().tolist()
    pos = positions.cpu().tolist()
    for t in range(append_key.size(0)):
        b, p = batch[t], pos[t]
        if b < 0 or b >= len(indptr) - 1 or p < 0:
            continue
        entry = indptr[b] + p // page_size
        if entry < 0 or entry >= indptr[b + 1] or entry >= len(indices):
            continue
        page = indices[entry]
        if page < 0 or page >= num_pages:
            continue
        slot = p % page_size
        if kv_layout == "NHD":
            k_cache[page, slot] = append_key[t].to(k_cache.dtype)
            v_cache[page, slot] = append_value[t].to(v_cache.dtype)
        else:
            k_cache[page, :, slot] = append_key[t].to(k_cache.dtype)
            v_cache[page, :, slot] = append_value[t].to(v_cache.dtype)
