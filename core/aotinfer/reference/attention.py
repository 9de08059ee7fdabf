"""Reference attention: the CPU path of the decode API and the oracle of the GPU tests.

Semantics are those of providers/csrc/attention/decode_launchers.h:

- logits ``s = (q . k) * sm_scale * q_scale * k_scale``; with ``logits_soft_cap > 0``,
  ``s = cap * tanh(s / cap)``; ALiBi then adds ``slope_h * (j - position)``;
- ROPE_LLAMA rotates q and k before the product (non-interleaved halves, ``inv_freq_i =
  1 / (rope_scale * rope_theta ** (2i / D))``), keys at their index j, queries at their
  position;
- query row r of a request with ``Lq`` query rows and ``Lk`` keys sits at position
  ``Lk - Lq + r`` and sees key j iff ``j <= position`` (bottom-right causal) and, with
  ``window_left >= 0``, ``position - j <= window_left``;
- ``sinks`` (one logit per query head) join the softmax denominator without a value;
- ``out = v_scale * softmax(s) . v``; ``lse = log2(denominator)`` (base 2, sinks included).
  A row that sees no key and has no sink gets ``out = 0`` and ``lse = -inf``.

Everything is computed in ``compute_dtype`` (float32 by default, float64 for tests); fp8
keys and values are dequantised by their scales, which enter as above.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

LOG2E = 1.0 / math.log(2.0)


def rope_llama(
    x: torch.Tensor, positions: torch.Tensor, rope_scale: float, rope_theta: float
) -> torch.Tensor:
    """Llama rotary embedding on the last dimension, non-interleaved halves.

    Parameters
    ----------
    x : torch.Tensor
        ``(L, H, D)`` float (the computation dtype); D even.
    positions : torch.Tensor
        ``(L,)`` position of each row.

    Returns
    -------
    torch.Tensor
        ``(L, H, D)``: ``[x1 cos - x2 sin, x2 cos + x1 sin]`` with ``x1, x2`` the two halves
        and angle ``position * inv_freq_i``.
    """
    d = x.size(-1)
    half = d // 2
    i = torch.arange(half, dtype=x.dtype, device=x.device)
    inv_freq = 1.0 / (rope_scale * torch.pow(rope_theta, 2 * i / d))
    angle = positions.to(device=x.device, dtype=x.dtype).unsqueeze(-1) * inv_freq  # (L, half)
    cos = angle.cos().unsqueeze(1)
    sin = angle.sin().unsqueeze(1)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    sm_scale: Optional[float] = None,
    q_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    logits_soft_cap: float = 0.0,
    window_left: int = -1,
    pos_encoding_mode: str = "NONE",
    rope_scale: float = 1.0,
    rope_theta: float = 1e4,
    alibi_slopes: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    key_range: Optional[Tuple[int, int]] = None,
    compute_dtype: torch.dtype = torch.float32,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention of one request's query rows over its keys (the module's semantics).

    Parameters
    ----------
    q : torch.Tensor
        ``(Lq, Hq, D)`` any float dtype.
    k, v : torch.Tensor
        ``(Lk, Hkv, D)`` (NHD), any float dtype including fp8; ``Hq % Hkv == 0`` and query
        head h reads KV head ``h // (Hq // Hkv)``.
    causal : bool
        Bottom-right causal mask among the rows (decode: True). False drops the causal mask
        but keeps the window.
    alibi_slopes : torch.Tensor, optional
        ``(Hq,)``; required for ``pos_encoding_mode="ALIBI"``.
    sinks : torch.Tensor, optional
        ``(Hq,)`` extra logit per head in the denominator.
    key_range : (int, int), optional
        Only keys ``lo <= j < hi`` are visible (on top of the masks): the partial state of
        one split-KV chunk, which merges with the others by ``reference.cascade``.

    Returns
    -------
    out : torch.Tensor
        ``(Lq, Hq, D)`` in ``compute_dtype``.
    lse : torch.Tensor
        ``(Lq, Hq)`` in ``compute_dtype``, base 2.
    """
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    if hq % hkv != 0:
        raise ValueError(f"num_qo_heads ({hq}) must be a multiple of num_kv_heads ({hkv})")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    cd = compute_dtype
    dev = q.device
    qf, kf, vf = q.to(cd), k.to(device=dev, dtype=cd), v.to(device=dev, dtype=cd)
    q_pos = torch.arange(lq, dtype=torch.int64, device=dev) + (lk - lq)
    k_pos = torch.arange(lk, dtype=torch.int64, device=dev)
    if pos_encoding_mode == "ROPE_LLAMA":
        qf = rope_llama(qf, q_pos, rope_scale, rope_theta)
        kf = rope_llama(kf, k_pos, rope_scale, rope_theta)
    group = hq // hkv
    kf = kf.repeat_interleave(group, dim=1)  # (Lk, Hq, D)
    vf = vf.repeat_interleave(group, dim=1)

    s = torch.einsum("qhd,khd->hqk", qf, kf) * (sm_scale * q_scale * k_scale)
    if logits_soft_cap > 0:
        s = logits_soft_cap * torch.tanh(s / logits_soft_cap)
    rel = (k_pos.unsqueeze(0) - q_pos.unsqueeze(1)).to(cd)  # (Lq, Lk): j - position
    if pos_encoding_mode == "ALIBI":
        if alibi_slopes is None:
            raise ValueError("pos_encoding_mode ALIBI needs alibi_slopes")
        s = s + alibi_slopes.to(device=dev, dtype=cd).view(hq, 1, 1) * rel
    visible = torch.ones(lq, lk, dtype=torch.bool, device=dev)
    if causal:
        visible &= rel <= 0
    if window_left >= 0:
        visible &= -rel <= window_left
    if key_range is not None:
        visible &= (k_pos >= key_range[0]) & (k_pos < key_range[1])
    s = s.masked_fill(~visible, float("-inf"))

    m = s.amax(dim=-1)  # (Hq, Lq); -inf where nothing is visible
    if sinks is not None:
        sink = sinks.to(device=dev, dtype=cd).view(hq, 1).expand(hq, lq)
        m = torch.maximum(m, sink)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_safe.unsqueeze(-1))
    denom = p.sum(dim=-1)
    if sinks is not None:
        denom = denom + torch.exp(sink - m_safe)
    out = torch.einsum("hqk,khd->qhd", p, vf)
    empty = denom == 0
    out = out / torch.where(empty, torch.ones_like(denom), denom).t().unsqueeze(-1) * v_scale
    lse = (m_safe + torch.log(denom)) * LOG2E  # log(0) = -inf for empty rows
    return out, lse.t().contiguous()


def gather_paged_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_ids: torch.Tensor,
    kv_len: int,
    kv_layout: str = "NHD",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One request's keys and values, ``(kv_len, Hkv, D)`` each, from its pages.

    ``k_cache``/``v_cache`` are ``(pages, page_size, Hkv, D)`` (NHD) or ``(pages, Hkv,
    page_size, D)`` (HND); ``page_ids`` lists the request's pages in order.
    """
    ids = page_ids.to(device=k_cache.device, dtype=torch.int64)
    k, v = k_cache[ids], v_cache[ids]
    if kv_layout == "HND":
        k, v = k.transpose(1, 2), v.transpose(1, 2)
    hkv, d = k.shape[-2:]
    return k.reshape(-1, hkv, d)[:kv_len], v.reshape(-1, hkv, d)[:kv_len]


def batch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    *,
    kv_layout: str = "NHD",
    q_len_per_req: int = 1,
    compute_dtype: torch.dtype = torch.float32,
    **params,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decode over a paged KV cache.

    Parameters
    ----------
    q : torch.Tensor
        ``(B * q_len_per_req, Hq, D)``; rows ``b*q_len_per_req .. +q_len_per_req-1`` belong to
        request b.
    k_cache, v_cache : torch.Tensor
        4-D cache halves in ``kv_layout`` (see :func:`gather_paged_kv`); page size is read
        from them.
    kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
        The CSR page table: request b owns pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``
        and has ``page_size * (pages_b - 1) + kv_last_page_len[b]`` keys.
    **params
        Keyword arguments of :func:`attention` (scales, soft cap, window, position mode,
        slopes, sinks).

    Returns
    -------
    out : torch.Tensor
        ``(B * q_len_per_req, Hq, D)`` in ``compute_dtype``.
    lse : torch.Tensor
        ``(B * q_len_per_req, Hq)`` in ``compute_dtype``, base 2.
    """
    page_size = k_cache.size(1) if kv_layout == "NHD" else k_cache.size(2)
    indptr = kv_indptr.cpu().tolist()
    last = kv_last_page_len.cpu().tolist()
    outs, lses = [], []
    for b in range(len(indptr) - 1):
        pages = kv_indices[indptr[b] : indptr[b + 1]]
        kv_len = page_size * (len(pages) - 1) + last[b] if len(pages) else 0
        k, v = gather_paged_kv(k_cache, v_cache, pages, kv_len, kv_layout)
        rows = q[b * q_len_per_req : (b + 1) * q_len_per_req]
        o, s = attention(rows, k, v, causal=True, compute_dtype=compute_dtype, **params)
        outs.append(o)
        lses.append(s)
    return torch.cat(outs), torch.cat(lses)


def single_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv_layout: str = "NHD",
    compute_dtype: torch.dtype = torch.float32,
    **params,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decode of one query ``(Hq, D)`` over contiguous ``k``/``v`` ``(kv_len, Hkv, D)`` (NHD)
    or ``(Hkv, kv_len, D)`` (HND); returns ``out (Hq, D)`` and ``lse (Hq,)`` (base 2)."""
    if kv_layout == "HND":
        k, v = k.transpose(0, 1), v.transpose(0, 1)
    out, lse = attention(q.unsqueeze(0), k, v, compute_dtype=compute_dtype, **params)
    return out[0], lse[0]
