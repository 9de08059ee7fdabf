"""A simulated provider for the decode-attention family: providers/csrc/attention/
decode_launchers.h read as Python. The CPU tests install it (``install``) so that the
core's CUDA path (argument order, workspace carving, split plans, page tables) runs on CPU
tensors: ``_views.view`` returns the tensor itself, the views run() builds by hand (q, the
cache halves, out, lse; single decode's batch of one and partial buffers) are read back into
tensors over the same memory (``tensor_from_view``), and every precondition the header
states is asserted before computing the result from the reference.

Split-KV is simulated as the header describes it: without a work list, split s of request
b covers the pages ``[s * chunk_pages, (s + 1) * chunk_pages)`` (keys, without a page
table); with one, request b's entries name its pages and partial slots (slot -1: written
straight to the output). Each
piece writes its partial state to ``partial_out``/``partial_lse`` (lse -inf when empty), and
a merge combines them; sinks join once, after the merge.
"""

from __future__ import annotations

import ctypes
import math

import torch

from aotinfer import _decode_launch, _views
from aotinfer.reference import attention as ref_attn
from aotinfer.reference import cascade as ref_cascade
from aotinfer.reference import page as ref_page

POS_NAMES = ("NONE", "ROPE_LLAMA", "ALIBI")
LAYOUTS = ("NHD", "HND")
Q_DTYPES = (torch.float16, torch.bfloat16)
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
V_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _ceil_div(a, b):
    return -(-a // b)


_CODE_DTYPES = {code: dtype for dtype, code in _views.DTYPE_CODES.items()}


def tensor_from_view(v):
    """A CPU tensor over the memory a provider view names (the views run() builds itself
    from the checked tensors' pointers, strides and the plan's dtype codes); anything that
    is not a view (a tensor, None) as it is. Writes go to the viewed memory, as a kernel's
    would."""
    if not isinstance(v, tuple):
        return v
    ptr, code, shape, strides, device = v
    assert device == -1, f"a CPU tensor's view names device -1, got {device}"
    dtype = _CODE_DTYPES[code]
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    itemsize = dtype.itemsize
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    raw = (ctypes.c_char * (extent * itemsize)).from_address(ptr)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).as_strided(shape, strides)


class FakePreparedDecode:
    """A prepared batch_decode call (decode_launchers.h): ``launch`` puts the call's pointers,
    q's strides and the page count into the prepared views and runs batch_decode on them,
    which is what the header promises the provider's prepared launch does."""

    def __init__(self, kernels, args):
        self.kernels, self.args = kernels, args

    def launch(self, q, q_stride_row, q_stride_head, k, v, num_pages, out, lse, stream):
        self._launch(q, q_stride_row, q_stride_head, k, v, num_pages, out, lse, None, stream)

    def launch_with(
        self, q, q_stride_row, q_stride_head, k, v, num_pages, out, lse, sm_scale, k_scale,
        v_scale, window_left, sinks, stream,
    ):  # fmt: skip
        """launch with the call's scalars and sinks (a pointer, 0: none) in place of the
        prepared ones; a prepared call without sinks takes none."""
        args = self.args
        if sinks != 0:
            assert args[28] is not None, "sinks passed to a call prepared without them"
            t = args[28]
            sinks = tensor_from_view((sinks, t[1], t[2], t[3], t[4]))
        else:
            sinks = None
        per_call = {19: sm_scale, 21: window_left, 26: k_scale, 27: v_scale, 28: sinks}
        self._launch(q, q_stride_row, q_stride_head, k, v, num_pages, out, lse, per_call, stream)

    def _launch(self, q, q_stride_row, q_stride_head, k, v, num_pages, out, lse, per_call, stream):
        kernels = self.kernels
        kernels.calls.append(("prepared_launch", dict(q=q, k=k, v=v, num_pages=num_pages)))
        args = list(self.args)
        for i, value in (per_call or {}).items():
            args[i] = value
        q_t, k_t, v_t, out_t, lse_t = args[0], args[1], args[2], args[9], args[10]
        args[0] = (q, q_t[1], q_t[2], (q_stride_row, q_stride_head, 1), q_t[4])
        args[1] = (k, k_t[1], (num_pages, *k_t[2][1:]), k_t[3], k_t[4])
        args[2] = (v, v_t[1], (num_pages, *v_t[2][1:]), v_t[3], v_t[4])
        args[9] = (out, *out_t[1:])
        args[10] = None if lse == 0 else (lse, *lse_t[1:])
        kernels.batch_decode(*args, stream)


class FakeKernels:
    """Records every call (name, args) in ``calls`` and computes what the kernel would."""

    def __init__(self):
        self.calls = []
        self.capturing = False  # what _decode_launch.capturing() answers
        self.prepared = 0  # prepare_batch_decode calls

    def prepare_batch_decode(self, *args):
        """batch_decode's arguments but the stream; the views' pointers are not read."""
        assert len(args) == 29, f"prepare_batch_decode takes 29 arguments, got {len(args)}"
        self.prepared += 1
        return FakePreparedDecode(self, args)

    def batch_decode(
        self,
        q,
        k_cache,
        v_cache,
        kv_layout,
        page_size,
        indptr,
        indices,
        last_page_len,
        kv_len_scalar,
        out,
        lse,
        partial_out,
        partial_lse,
        work,
        split_counts,
        arrivals,
        chunk_pages,
        max_splits,
        q_len_per_req,
        sm_scale,
        logits_soft_cap,
        window_left,
        pos_encoding_mode,
        rope_scale,
        rope_theta,
        alibi_slopes,
        k_scale,
        v_scale,
        sinks,
        stream,
    ):
        q, k_cache, v_cache, out, lse, partial_out, partial_lse = map(
            tensor_from_view, (q, k_cache, v_cache, out, lse, partial_out, partial_lse)
        )
        self.calls.append(("batch_decode", dict(locals())))
        rows, hq, d = q.shape
        assert q.dtype in Q_DTYPES and q.stride(-1) == 1
        assert k_cache.dim() == 4 and v_cache.shape == k_cache.shape
        assert k_cache.dtype == v_cache.dtype and k_cache.dtype in (q.dtype, *FP8)
        assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
        assert k_cache.size(0) >= 1  # the kernels clamp page ids into the cache
        assert kv_layout in (0, 1)
        layout = LAYOUTS[kv_layout]
        cache_ps = k_cache.size(1) if layout == "NHD" else k_cache.size(2)
        hkv = k_cache.size(2) if layout == "NHD" else k_cache.size(1)
        assert cache_ps == page_size and k_cache.size(3) == d and hq % hkv == 0
        assert out.shape == q.shape and out.dtype == q.dtype
        assert lse is None or (lse.shape == (rows, hq) and lse.dtype == torch.float32)
        assert lse is None or lse.is_contiguous()
        assert q.stride(0) % 8 == 0 and q.stride(1) % 8 == 0  # 16-byte aligned rows
        for t in (k_cache, v_cache):
            per16 = 16 if t.dtype in FP8 else 8
            assert all(t.stride(i) % per16 == 0 for i in range(3))
        assert isinstance(chunk_pages, int) and chunk_pages >= 1
        assert isinstance(max_splits, int) and max_splits >= 1
        if max_splits > 1:
            assert partial_out.shape == (rows, max_splits, hq, d)
            assert partial_lse.shape == (rows, max_splits, hq)
            assert partial_out.dtype == partial_lse.dtype == torch.float32
        else:
            assert partial_out is None and partial_lse is None
        assert (alibi_slopes is not None) == (pos_encoding_mode == 2)
        if alibi_slopes is not None:
            assert alibi_slopes.shape == (hq,) and alibi_slopes.dtype == torch.float32
        if sinks is not None:
            assert sinks.shape == (hq,) and sinks.dtype == torch.float32
        assert all(
            isinstance(x, float)
            for x in (sm_scale, logits_soft_cap, rope_scale, rope_theta, k_scale, v_scale)
        )
        assert isinstance(window_left, int) and isinstance(stream, int)

        if indptr is None:  # single request over k_cache[0] rows 0 .. kv_len_scalar - 1
            assert indices is None and last_page_len is None
            assert k_cache.size(0) == 1 and page_size == kv_len_scalar
            batch, pages, kv_lens = 1, [[0]], [kv_len_scalar]
            if max_splits > 1:  # split-KV over the keys: chunk_pages counts keys (pages of one)
                key_unit = 1
                assert _ceil_div(kv_len_scalar, chunk_pages) <= max_splits
        if indptr is not None or max_splits == 1:
            key_unit = page_size
        if indptr is not None:
            for t in (indptr, indices, last_page_len):
                assert t.dtype == torch.int32 and t.dim() == 1
                assert t.numel() <= 1 or t.stride(0) == 1  # contiguous, as the launcher checks
            ip, lp = indptr.tolist(), last_page_len.tolist()
            batch = len(ip) - 1
            assert len(lp) == batch and ip[-1] <= indices.numel()
            pages = [indices[ip[b] : ip[b + 1]].tolist() for b in range(batch)]
            kv_lens = [page_size * (len(pages[b]) - 1) + lp[b] for b in range(batch)]
            for b in range(batch):
                assert 1 <= lp[b] <= page_size
                # The planner's promise: every request fits in max_splits chunks.
                assert work is not None or _ceil_div(len(pages[b]), chunk_pages) <= max_splits
        assert rows == batch * q_len_per_req
        if work is not None or arrivals is not None:  # the split merge's counters, all 0
            row_blocks = _ceil_div(q_len_per_req * (hq // hkv), 16)
            assert arrivals.dtype == torch.int32 and arrivals.dim() == 1
            assert arrivals.numel() >= batch * row_blocks * hkv and not arrivals.any()
        pieces = self._pieces(work, split_counts, batch, pages, chunk_pages, max_splits)

        params = dict(
            sm_scale=sm_scale,
            k_scale=k_scale,
            v_scale=1.0,
            logits_soft_cap=logits_soft_cap,
            window_left=window_left,
            pos_encoding_mode=POS_NAMES[pos_encoding_mode],
            rope_scale=rope_scale,
            rope_theta=rope_theta,
            alibi_slopes=alibi_slopes,
        )
        for b in range(batch):
            ids = torch.tensor(pages[b], dtype=torch.int64)
            k, v = ref_attn.gather_paged_kv(k_cache, v_cache, ids, kv_lens[b], layout)
            r0 = b * q_len_per_req
            qb = q[r0 : r0 + q_len_per_req]
            states = [
                ref_attn.attention(qb, k, v, key_range=(lo * key_unit, hi * key_unit), **params)
                for lo, hi in pieces[b]
            ]
            vs = torch.stack([o for o, _ in states], dim=1)  # (q_len, S, Hq, D)
            ls = torch.stack([s for _, s in states], dim=1)  # (q_len, S, Hq)
            if len(pieces[b]) > 1:
                partial_out[r0 : r0 + q_len_per_req, : len(pieces[b])] = vs
                partial_lse[r0 : r0 + q_len_per_req, : len(pieces[b])] = ls
            o, s = ref_cascade.merge_states(vs, ls)
            if sinks is not None:  # the sink joins the denominator once
                total = torch.logaddexp2(s, sinks.view(1, hq) / math.log(2.0))
                o = o * torch.exp2(s - total).unsqueeze(-1)
                s = total
            out[r0 : r0 + q_len_per_req] = (o * v_scale).to(out.dtype)
            if lse is not None:
                lse[r0 : r0 + q_len_per_req] = s

    @staticmethod
    def _pieces(work, split_counts, batch, pages, chunk_pages, max_splits):
        """Each request's page ranges in partial-slot order, as the kernel would cut them."""
        if work is None:
            assert split_counts is None
            if max_splits == 1:
                return [[(0, max(len(p), 1))] for p in pages]
            return [
                [(s * chunk_pages, (s + 1) * chunk_pages) for s in range(max_splits)]
                for _ in range(batch)
            ]
        assert work.dtype == split_counts.dtype == torch.int32
        assert work.dim() in (2, 3) and work.shape[-1] == 4 and work.is_contiguous()
        assert split_counts.shape == (batch,)
        counts = split_counts.tolist()
        assert max(counts) == max_splits
        # A CTA group runs its entries in turn; request -1 ends its run (decode_launchers.h).
        runs = work.tolist() if work.dim() == 3 else [[e] for e in work.tolist()]
        entries = []
        for run in runs:
            ends = [i for i, e in enumerate(run) if e[0] < 0]
            assert not ends or ends[0] > 0, "a run starts with an entry"
            if ends:
                assert all(e == [-1, 0, 0, 0] for e in run[ends[0] :]), "padding ends a run"
                run = run[: ends[0]]
            entries += run
        mine = [[] for _ in range(batch)]
        for b, slot, lo, hi in entries:
            assert 0 <= b < batch and 0 <= lo <= hi <= len(pages[b]) and hi - lo <= chunk_pages
            mine[b].append((slot, lo, hi))
        out = []
        for b in range(batch):
            assert len(mine[b]) == counts[b]
            if counts[b] == 1:
                assert mine[b] == [(-1, 0, len(pages[b]))]
            else:
                assert sorted(slot for slot, _, _ in mine[b]) == list(range(counts[b]))
            ranges = sorted((lo, hi) for _, lo, hi in mine[b])
            assert ranges[0][0] == 0 and ranges[-1][1] == len(pages[b])
            assert all(a[1] == c[0] for a, c in zip(ranges, ranges[1:]))
            out.append([(lo, hi) for _, lo, hi in sorted(mine[b])])
        return out

    def merge_states(self, v, s, v_out, s_out, stream):
        self.calls.append(("merge_states", dict(locals())))
        assert v.dim() == 4 and v.dtype in V_DTYPES and s.dtype == torch.float32
        assert v_out.shape == (v.size(0), v.size(2), v.size(3)) and v_out.dtype == v.dtype
        vm, sm = ref_cascade.merge_states(v, s)
        v_out.copy_(vm)
        if s_out is not None:
            s_out.copy_(sm)

    def merge_state_in_place(self, v, s, v_other, s_other, mask, stream):
        self.calls.append(("merge_state_in_place", dict(locals())))
        assert v.shape == v_other.shape and v.dtype == v_other.dtype
        assert s.dtype == s_other.dtype == torch.float32
        assert mask is None or (mask.dtype == torch.bool and mask.shape == (v.size(0),))
        ref_cascade.merge_state_in_place(v, s, v_other, s_other, mask)

    def append_paged_kv_cache(
        self,
        append_key,
        append_value,
        batch_indices,
        positions,
        k_cache,
        v_cache,
        kv_layout,
        page_size,
        indices,
        indptr,
        stream,
    ):
        self.calls.append(("append_paged_kv_cache", dict(locals())))
        nnz = append_key.size(0)
        assert append_key.stride(-1) == 1 and append_value.stride(-1) == 1
        assert batch_indices.dtype == positions.dtype == torch.int32
        assert batch_indices.shape == positions.shape == (nnz,)
        assert indices.dtype == indptr.dtype == torch.int32
        layout = LAYOUTS[kv_layout]
        assert page_size == (k_cache.size(1) if layout == "NHD" else k_cache.size(2))
        ref_page.append_paged_kv_cache(
            append_key,
            append_value,
            batch_indices,
            positions,
            k_cache,
            v_cache,
            indices,
            indptr,
            layout,
        )


def install(monkeypatch, num_sms: int = 132) -> FakeKernels:
    """Route every attention call through a FakeKernels on CPU tensors; returns it."""
    fake = FakeKernels()
    monkeypatch.setattr(_decode_launch, "use_reference", lambda device: False)
    monkeypatch.setattr(_decode_launch, "provider_kernels", lambda device: fake)
    monkeypatch.setattr(_decode_launch, "num_sms", lambda device: num_sms)
    monkeypatch.setattr(_decode_launch, "capturing", lambda: fake.capturing)
    monkeypatch.setattr(_views, "view", lambda t: t)
    monkeypatch.setattr(_views, "stream_handle", lambda device: 0)
    return fake
