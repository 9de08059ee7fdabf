"""single_decode_with_kv_cache and BatchDecodeWithPagedKVCacheWrapper on CPU tensors:
argument handling, every error before any launch, the reference path, and the provider
path (argument order, split-KV, workspace carving, CUDA-graph buffers) through the
simulated provider of decode_contract.py."""

from __future__ import annotations

import math
import re
import warnings

import decode_contract
import numpy as np
import pytest
import torch

import aotinfer
from aotinfer import _decode_plan
from aotinfer.reference import attention as ref

HQ, HKV, D, PS = 8, 2, 64, 16


def _randn(shape, seed, dtype=torch.float16, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def make_batch(
    kv_lens,
    page_size=PS,
    layout="NHD",
    hq=HQ,
    hkv=HKV,
    d=D,
    dtype=torch.float16,
    q_len=1,
    seed=0,
    tuple_cache=False,
    spare_pages=5,
):
    """A random paged batch: (q, cache, indptr, indices, last_page_len)."""
    pages = [-(-n // page_size) for n in kv_lens]
    total = sum(pages) + spare_pages
    g = torch.Generator().manual_seed(seed)
    indices = torch.randperm(total, generator=g)[: sum(pages)].to(torch.int32)
    indptr = torch.tensor([0] + pages).cumsum(0).to(torch.int32)
    last = torch.tensor(
        [n - (p - 1) * page_size for n, p in zip(kv_lens, pages)], dtype=torch.int32
    )
    if layout == "NHD":
        shape = (total, 2, page_size, hkv, d)
    else:
        shape = (total, 2, hkv, page_size, d)
    cache = _randn(shape, seed + 1, torch.float32).to(dtype)
    if tuple_cache:
        cache = (cache[:, 0].contiguous(), cache[:, 1].contiguous())
    q = _randn(
        (len(kv_lens) * q_len, hq, d),
        seed + 2,
        torch.float16 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else dtype,
    )
    return q, cache, indptr, indices, last


def workspace(nbytes=8 << 20):
    return torch.zeros(nbytes, dtype=torch.uint8)


def planned(kv_lens=(1, 17, 40), layout="NHD", **plan_kwargs):
    q, cache, indptr, indices, last = make_batch(list(kv_lens), layout=layout)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout)
    w.plan(indptr, indices, last, HQ, HKV, D, PS, **plan_kwargs)
    return w, q, cache, indptr, indices, last


def expected(q, cache, indptr, indices, last, layout="NHD", q_len=1, **params):
    k, v = aotinfer._attention_utils.unpack_paged_kv_cache(cache, layout)
    o, s = ref.batch_decode(
        q, k, v, indptr, indices, last, kv_layout=layout, q_len_per_req=q_len, **params
    )
    return o, s


def close(out, lse, exp_o, exp_l, tol=2e-3):
    torch.testing.assert_close(out.float(), exp_o.float(), rtol=tol, atol=tol)
    if lse is not None:
        torch.testing.assert_close(lse, exp_l.float(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- constructor


def test_constructor_errors():
    ws = workspace()
    with pytest.raises(KeyError, match="Invalid kv_layout NDH"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NDH")
    with pytest.raises(NotImplementedError, match="supports backend 'auto' and 'fa2'"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, backend="trtllm-gen")
    with pytest.raises(ValueError, match="backend must be 'auto' or 'fa2'"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, backend="fast")
    with pytest.raises(ValueError, match="backend must be 'auto' or 'fa2', got array"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, backend=np.array(["auto", "fa2"]))
    with pytest.raises(NotImplementedError, match="jit_args"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, jit_args=[1])
    r = ws[1:].data_ptr() % 16
    with pytest.raises(ValueError, match=f"must be 16-byte aligned, got data_ptr % 16 = {r}"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws[1:])
    for backend in ("auto", "fa2"):
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, backend=backend, use_tensor_cores=True)
        assert w.use_tensor_cores and not w.is_cuda_graph_enabled


def test_cuda_graph_constructor_errors():
    ws = workspace()
    ip, ix, lp = (
        torch.zeros(5, dtype=torch.int32),
        torch.zeros(64, dtype=torch.int32),
        torch.zeros(4, dtype=torch.int32),
    )
    with pytest.raises(
        ValueError, match="paged_kv_indptr_buffer should be a torch.Tensor in cudagraph mode"
    ):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, use_cuda_graph=True)
    with pytest.raises(ValueError, match="paged_kv_indices_buffer should be a torch.Tensor"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws, use_cuda_graph=True, paged_kv_indptr_buffer=ip
        )
    text = (
        "The size of paged_kv_indptr_buffer should be batch_size + 1 (paged_kv_last_page_len_"
        "buffer holds batch_size = {} entries; paged_kv_indptr_buffer holds {})"
    )
    with pytest.raises(ValueError, match=re.escape(text.format(4, 4))):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(ws, ip[:4], ix, lp)
    with pytest.raises(ValueError, match=re.escape(text.format(3, 5))):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(ws, ip, ix, lp[:3])
    with pytest.raises(ValueError, match="must have dtype int32"):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(ws, ip.long(), ix, lp)
    with pytest.raises(
        ValueError, match=re.escape("paged_kv_last_page_len_buffer must hold batch_size >= 1")
    ):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(ws, ip[:1], ix, lp[:0])
    w = aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(ws, ip, ix, lp)
    assert w.is_cuda_graph_enabled and not w.use_tensor_cores


# ---------------------------------------------------------------- plan errors


def _plan(w=None, kv_lens=(1, 17, 40), *args, hq=HQ, hkv=HKV, d=D, ps=PS, table=None, **kw):
    w = w or aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    _, _, indptr, indices, last = make_batch(list(kv_lens), page_size=max(ps, 1))
    if table is not None:
        indptr, indices, last = table
    w.plan(indptr, indices, last, hq, hkv, d, ps, *args, **kw)
    return w


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        (
            dict(hq=30, hkv=8),
            ValueError,
            r"num_qo_heads \(30\) must be a multiple of num_kv_heads \(8\)",
        ),
        (
            dict(d=96),
            ValueError,
            "head_dim 96 is not built; aotinfer decode kernels exist for head_dim 64, 128, 256",
        ),
        (dict(ps=0), ValueError, "page_size must be a positive int"),
        (dict(pos_encoding_mode="XPOS"), KeyError, "Invalid pos_encoding_mode XPOS"),
        (
            dict(q_data_type="float32"),
            ValueError,
            "q_data_type must be float16 or bfloat16, got float32",
        ),
        (
            dict(q_data_type=torch.float16, kv_data_type="bfloat16"),
            ValueError,
            "kv_data_type must be q_data_type",
        ),
        (dict(data_type="bfloat16"), ValueError, "data_type sets only kv_data_type"),
        (
            dict(q_data_type="bfloat16", o_data_type="float16"),
            ValueError,
            "o_data_type must equal q_data_type",
        ),
        (dict(q_data_type="floatish"), ValueError, "q_data_type must be a torch.dtype or its name"),
        (
            dict(q_len_per_req=2),
            ValueError,
            r"q_len_per_req > 1 requires tensor-core decode \(use_tensor_cores=True or the trtllm-gen/cute-dsl backend\).",  # noqa: E501
        ),
        (
            dict(fixed_split_size=4),
            ValueError,
            "fixed_split_size is only supported by tensor core decode for now.",
        ),
        (dict(window_right=3), NotImplementedError, "window_right"),
        (dict(window_left=-2), ValueError, "window_left must be an int >= -1"),
        (dict(logits_soft_cap=-1.0), ValueError, "logits_soft_cap must be >= 0"),
        (dict(sm_scale=0.0), ValueError, "sm_scale must be positive"),
        (dict(rope_theta=-1.0), ValueError, "rope_theta must be positive"),
        (dict(bogus=1), TypeError, "plan\\(\\) got an unexpected keyword argument 'bogus'"),
    ],
)
def test_plan_errors(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        _plan(**kwargs)


def test_plan_q_len_zero_and_kv_shorter_than_q_len():
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    with pytest.raises(ValueError, match="q_len_per_req must be an int >= 1, got 0"):
        _plan(w, q_len_per_req=0)
    with pytest.raises(ValueError, match="request 0 has kv_len 1 < q_len_per_req 2"):
        _plan(w, (1, 17), q_len_per_req=2)


def test_plan_page_table_errors():
    i32 = dict(dtype=torch.int32)
    idx = torch.arange(10, **i32)
    bad = [
        (
            (torch.tensor([0, 2, 3], **i32), idx, torch.tensor([0, 4], **i32)),
            r"last_page_len must be in \[1, page_size=16\], got 0 for request 0",
        ),
        (
            (torch.tensor([0, 2, 3], **i32), idx, torch.tensor([5, 17], **i32)),
            r"last_page_len must be in \[1, page_size=16\], got 17 for request 1",
        ),
        (
            (torch.tensor([0, 2, 2], **i32), idx, torch.tensor([5, 1], **i32)),
            "request 1 has 0 pages",
        ),
        (
            (torch.tensor([1, 2, 3], **i32), idx, torch.tensor([5, 1], **i32)),
            r"indptr\[0\] must be 0, got 1",
        ),
        (
            (torch.tensor([0, 6, 12], **i32), idx, torch.tensor([5, 1], **i32)),
            r"indptr\[-1\] = 12 pages but indices has only 10 entries",
        ),
        (
            (torch.tensor([0, 2, 3], **i32), idx, torch.tensor([5, 1, 1], **i32)),
            "last_page_len must have batch_size = len\\(indptr\\) - 1 = 2 entries, got 3",
        ),
        (
            (torch.tensor([0, 2, 3], dtype=torch.float32), idx, torch.tensor([5, 1], **i32)),
            "indptr must be int32",
        ),
    ]
    for table, text in bad:
        with pytest.raises(ValueError, match=text):
            _plan(table=table)


def test_plan_checks_page_ids_on_the_host_and_run_against_the_cache():
    """Page ids of a CPU table are checked in plan() (no sync) and against the cache's page
    count in run(); on CPU they used to wrap (-1 read the last page) or fail inside the
    reference, and 2**32 + 4 was cut to page 4."""
    i32 = dict(dtype=torch.int32)
    indptr, last = torch.tensor([0, 2, 5], **i32), torch.tensor([3, 4], **i32)
    for ids, bad, at in (([0, 1, 2, 3, -1], -1, 4), ([0, 2**32 + 4, 1, 2, 3], 2**32 + 4, 1)):
        with pytest.raises(
            ValueError, match=re.escape(f"page ids in [0, 2**31), got {bad} at indices[{at}]")
        ):
            _plan(table=(indptr, torch.tensor(ids), last))
    # Ids past indptr[-1] are not part of the table: not checked.
    w = _plan(table=(indptr, torch.tensor([0, 1, 2, 3, 4, -7], **i32), last))
    q, cache, *_ = make_batch([1, 17, 40])
    w.run(q[:2], cache)  # 5 pages used, the cache holds 10
    w = _plan(table=(indptr, torch.tensor([0, 1, 2, 3, 40], **i32), last))
    for c in (cache, (cache[:, 0], cache[:, 1])):
        with pytest.raises(
            ValueError,
            match=re.escape(
                f"paged_kv_cache has {cache.size(0)} pages but the page table of plan() uses "
                "page id 40"
            ),
        ):
            w.run(q[:2], c)


def test_plan_head_dim_must_be_an_int():
    with pytest.raises(ValueError, match="head_dim must be an int, got 64.0"):
        _plan(d=64.0)


def test_non_numeric_scalars_are_named():
    for name in ("logits_soft_cap", "sm_scale", "rope_scale", "rope_theta"):
        with pytest.raises(ValueError, match=f"{name} must be a float, got 'x'"):
            _plan(**{name: "x"})


def test_workspace_size_names_itself_in_its_errors():
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    _, _, indptr, indices, last = make_batch([1, 17])
    with pytest.raises(
        TypeError,
        match=re.escape(
            "BatchDecodeWithPagedKVCacheWrapper.workspace_size() got an unexpected keyword "
            "argument 'windw_left'"
        ),
    ):
        w.workspace_size(indptr, indices, last, HQ, HKV, D, PS, windw_left=3)


def test_workspace_size_takes_flashinfers_options_positionally():
    """FlashInfer's workspace_size names its options after page_size (no non_blocking, unlike
    plan()'s legacy order), so they pass positionally too."""
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    _, _, indptr, indices, last = make_batch([1, 17, 400])
    by_keyword = w.workspace_size(
        indptr, indices, last, HQ, HKV, D, PS, window_left=7, fixed_split_size=2
    )
    positional = w.workspace_size(
        indptr, indices, last, HQ, HKV, D, PS, "NONE", 7, None, "float16", None, None, None,
        None, None, None, None, None, 2,
    )  # fmt: skip
    assert positional == by_keyword and by_keyword[0] > 0


def test_plan_seq_lens_must_agree_and_block_tables_are_ignored():
    _, _, indptr, indices, last = make_batch([1, 17, 40])
    w = _plan(seq_lens=torch.tensor([1, 17, 40]), block_tables=torch.zeros(3, 3))
    assert w._plan.batch == 3
    with pytest.raises(ValueError, match="seq_lens .* does not match the kv lengths"):
        _plan(seq_lens=torch.tensor([1, 17, 41]))


def test_plan_legacy_positional_arguments():
    with pytest.warns(
        DeprecationWarning,
        match=r"Passing optional arguments to BatchDecodeWithPagedKVCacheWrapper.plan\(\) positionally is deprecated",  # noqa: E501
    ):
        w = _plan(None, (1, 17, 40), "ALIBI", 5, 30.0, "bfloat16")
    p = w._plan
    assert (p.pos_encoding_mode, p.window_left, p.logits_soft_cap) == ("ALIBI", 5, 30.0)
    assert p.q_dtype == p.kv_dtype == p.o_dtype == torch.bfloat16
    with pytest.raises(
        TypeError,
        match="accepts at most 16 deprecated optional positional arguments after page_size; got 17",
    ):
        _plan(None, (1,), *([None] * 17))
    with pytest.raises(TypeError, match="got multiple values for argument 'window_left'"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            _plan(None, (1,), "NONE", 3, window_left=4)


def test_plan_dtype_resolution():
    p = _plan()._plan
    assert (p.q_dtype, p.kv_dtype, p.o_dtype) == (torch.float16,) * 3
    p = _plan(data_type=torch.float8_e4m3fn)._plan  # fills only kv_data_type
    assert (p.q_dtype, p.kv_dtype) == (torch.float16, torch.float8_e4m3fn)
    p = _plan(q_data_type=None, data_type="bfloat16")._plan
    assert (p.q_dtype, p.kv_dtype, p.o_dtype) == (torch.bfloat16,) * 3
    p = _plan(q_data_type="bfloat16", kv_data_type="float8_e5m2", o_data_type="bfloat16")._plan
    assert (p.q_dtype, p.kv_dtype, p.o_dtype) == (torch.bfloat16, torch.float8_e5m2, torch.bfloat16)


def test_cuda_graph_plan_errors_and_copies():
    ip, ix, lp = (
        torch.zeros(4, dtype=torch.int32),
        torch.full((8,), -7, dtype=torch.int32),
        torch.zeros(3, dtype=torch.int32),
    )
    w = aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(), ip, ix, lp)
    with pytest.raises(
        ValueError,
        match="The batch size should be fixed in cudagraph mode, the runtime batch size 2 mismatches the batch size set during initialization 3",  # noqa: E501
    ):
        _plan(w, (1, 17))
    with pytest.raises(
        ValueError, match="The size of indices should be less than or equal to the allocated buffer"
    ):
        _plan(w, (16 * 4, 16 * 4, 17))  # 10 pages > 8
    _, _, indptr, indices, last = make_batch([1, 17, 40])
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    assert torch.equal(ip, indptr) and torch.equal(lp, last)
    assert torch.equal(ix[: indices.numel()], indices) and (ix[indices.numel() :] == -7).all()


# ---------------------------------------------------------------- run errors


def test_run_before_plan():
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    q, cache, *_ = make_batch([3])
    with pytest.raises(RuntimeError, match="plan\\(\\) must be called before run\\(\\)"):
        w.run(q, cache)


def test_run_q_errors():
    w, q, cache, *_ = planned()
    with pytest.raises(
        ValueError,
        match="The dtype of q torch.bfloat16 does not match the q_data_type torch.float16 specified in plan function.",  # noqa: E501
    ):
        w.run(q.bfloat16(), cache)
    with pytest.raises(ValueError, match="q has 4 heads but plan\\(\\) used num_qo_heads=8"):
        w.run(q[:, :4], cache)
    with pytest.raises(ValueError, match="q has head_dim 32 but plan\\(\\) used head_dim=64"):
        w.run(q[..., :32], cache)
    with pytest.raises(
        ValueError,
        match="q implies q_len_per_req=2 but plan\\(\\) used 1; re-plan with the matching q_len_per_req.",  # noqa: E501
    ):
        w.run(torch.cat([q, q]), cache)
    with pytest.raises(ValueError, match="q has 2 rows but plan\\(\\) was for batch_size 3"):
        w.run(q[:2], cache)
    with pytest.raises(ValueError, match="q must be a 3-D tensor"):
        w.run(q[0], cache)
    with pytest.raises(ValueError, match="q has 0 rows but plan\\(\\) was for batch_size 3"):
        w.run(q[:0], cache)


def test_run_cache_errors():
    w, q, cache, *_ = planned()
    with pytest.raises(
        ValueError,
        match="The dtype of k torch.bfloat16 does not match the kv_data_type torch.float16 specified in plan function.",  # noqa: E501
    ):
        w.run(q, cache.bfloat16())
    with pytest.raises(
        KeyError,
        match="Unrecognized paged_kv_cache type <class 'list'>, expect a single tensor or a tuple of tensor.",  # noqa: E501
    ):
        w.run(q, [cache])
    with pytest.raises(ValueError, match="paged_kv_cache as one tensor must be 5-D"):
        w.run(q, cache[:, 0])
    with pytest.raises(
        ValueError,
        match="paged_kv_cache has page_size 8 \\(NHD\\) but plan\\(\\) used page_size=16",
    ):
        w.run(q, cache[:, :, :8])
    with pytest.raises(ValueError, match="paged_kv_cache has 1 KV heads"):
        w.run(q, cache[:, :, :, :1])
    with pytest.raises(
        ValueError, match="paged_kv_cache has head_dim 32 but plan\\(\\) used head_dim=64"
    ):
        w.run(q, cache[..., :32])
    with pytest.raises(ValueError, match="v cache must have the k cache's shape"):
        w.run(q, (cache[:, 0], cache[:, 1, :, :1]))
    with pytest.raises(ValueError, match="contiguous last"):
        w.run(q, cache.transpose(-1, -2).contiguous().transpose(-1, -2))


def test_bool_flags_given_tensors_of_several_elements_are_named():
    """bool() of such a tensor raises torch's "ambiguous" RuntimeError, naming no argument;
    a one-element tensor reads as its truth value, as in Python."""
    two = torch.tensor([True, False])
    text = "must be a bool, got a tensor of 2 elements with shape (2,)"
    for name in ("use_tensor_cores", "use_cuda_graph"):
        with pytest.raises(ValueError, match=re.escape(f"{name} {text}")):
            aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), **{name: two})
    w, q, cache, indptr, indices, last = planned()
    with pytest.raises(ValueError, match=re.escape(f"return_lse {text}")):
        w.run(q, cache, return_lse=two)
    with pytest.raises(ValueError, match=re.escape(f"return_lse {text}")):
        w.forward(q, cache, return_lse=two)
    with pytest.raises(ValueError, match="return_lse must be a bool, got ndarray"):
        w.forward(q, cache, return_lse=np.array([True, False]))
    for name in ("disable_split_kv", "non_blocking"):
        with pytest.raises(ValueError, match=re.escape(f"{name} {text}")):
            _plan(**{name: two})
        with pytest.raises(ValueError, match=f"{name} must be a bool, got ndarray"):
            _plan(**{name: np.array([True, False])})
    out, lse = w.run(q, cache, return_lse=torch.tensor([True]))
    close(out, lse, *expected(q, cache, indptr, indices, last))
    q1, k, v = _randn((8, 64), 1), _randn((20, 2, 64), 2), _randn((20, 2, 64), 3)
    with pytest.raises(ValueError, match=re.escape(f"return_lse {text}")):
        aotinfer.single_decode_with_kv_cache(q1, k, v, return_lse=two)
    assert isinstance(aotinfer.single_decode_with_kv_cache(q1, k, v, return_lse=0), torch.Tensor)


def test_run_output_and_option_errors():
    w, q, cache, *_ = planned()
    with pytest.raises(
        ValueError, match=r"Invalid shape of out: expected \(3, 8, 64\), got \(3, 8, 32\)"
    ):
        w.run(q, cache, out=torch.empty(3, HQ, 32, dtype=torch.float16))
    with pytest.raises(
        ValueError, match="Invalid dtype of out: expected torch.float16, got torch.float32"
    ):
        w.run(q, cache, out=torch.empty(3, HQ, D))
    with pytest.raises(ValueError, match="Invalid device of out"):
        w.run(q, cache, out=torch.empty(3, HQ, D, dtype=torch.float16, device="meta"))
    with pytest.raises(ValueError, match="Invalid dtype of lse: expected torch.float32"):
        w.run(q, cache, lse=torch.empty(3, HQ, dtype=torch.float16), return_lse=True)
    with pytest.raises(ValueError, match="Invalid shape of lse: expected \\(3, 8\\)"):
        w.run(q, cache, lse=torch.empty(3, 1), return_lse=True)
    with pytest.raises(ValueError, match="sinks must be a float tensor of shape \\(8,\\)"):
        w.run(q, cache, sinks=torch.zeros(4))
    with pytest.raises(TypeError, match="extra positional argument"):
        w.run(q, cache, 1.0)
    with pytest.raises(NotImplementedError, match="kv_cache_sf"):
        w.run(q, cache, kv_cache_sf=(1, 2))
    with pytest.raises(ValueError, match="k_scale must be positive and finite"):
        w.run(q, cache, k_scale=-1.0)
    with pytest.raises(ValueError, match="window_left must be an int >= -1"):
        w.run(q, cache, window_left=-3)
    with pytest.raises(ValueError, match="q_scale must be a float, got 'x'"):
        w.run(q, cache, q_scale="x")
    with pytest.raises(
        ValueError, match="v_scale must be positive and finite as a float32, got inf"
    ):
        w.run(q, cache, v_scale=float("inf"))
    with pytest.raises(ValueError, match="window_left must be an int >= -1"):
        w.run(q, cache, window_left=True)
    with pytest.raises(ValueError, match="sinks must be on cpu"):
        w.run(q, cache, sinks=torch.zeros(HQ, device="meta"))
    with pytest.raises(ValueError, match="sinks must be a float tensor of shape \\(8,\\)"):
        w.run(q, cache, sinks=torch.zeros(HQ, dtype=torch.int32))
    with pytest.raises(ValueError, match="sinks must be a 1-D tensor"):
        w.run(q, cache, sinks=torch.zeros(1, HQ))
    with pytest.warns(DeprecationWarning, match="q_len_per_req"):
        w.run(q, cache, q_len_per_req=1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="re-plan"):
        w.run(q, cache, q_len_per_req=2)


# ---------------------------------------------------------------- CPU reference path


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("tuple_cache", [False, True])
def test_run_matches_reference(layout, tuple_cache):
    q, cache, indptr, indices, last = make_batch(
        [1, 17, 40, 3], layout=layout, tuple_cache=tuple_cache
    )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout)
    w.plan(
        indptr,
        indices,
        last,
        HQ,
        HKV,
        D,
        PS,
        pos_encoding_mode="ROPE_LLAMA",
        logits_soft_cap=20.0,
        rope_theta=500.0,
    )
    out, lse = w.run(q, cache, return_lse=True, q_scale=0.8, k_scale=1.1, v_scale=0.9)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    eo, el = expected(
        q,
        cache,
        indptr,
        indices,
        last,
        layout,
        pos_encoding_mode="ROPE_LLAMA",
        logits_soft_cap=20.0,
        rope_theta=500.0,
        q_scale=0.8,
        k_scale=1.1,
        v_scale=0.9,
    )
    close(out, lse, eo, el)


def test_run_out_lse_aliases_and_window_override():
    w, q, cache, indptr, indices, last = planned(window_left=4)
    out = torch.empty(3, HQ, D, dtype=torch.float16)
    lse = torch.empty(3, HQ)
    res = w.run(q, cache, out=out, lse=lse, return_lse=True)
    assert res[0] is out and res[1] is lse
    eo, el = expected(q, cache, indptr, indices, last, window_left=4)
    close(out, lse, eo, el)
    o2, l2 = w.run_return_lse(q, cache, window_left=10)
    eo, el = expected(q, cache, indptr, indices, last, window_left=10)
    close(o2, l2, eo, el)
    o3 = w.forward(q, cache, pos_encoding_mode="ALIBI", logits_soft_cap=5.0)
    eo, _ = expected(
        q,
        cache,
        indptr,
        indices,
        last,
        pos_encoding_mode="ALIBI",
        alibi_slopes=aotinfer._attention_utils.get_alibi_slopes(HQ),
        logits_soft_cap=5.0,
    )
    close(o3, None, eo, None)
    o4, l4 = w.forward_return_lse(q, cache)
    eo, el = expected(q, cache, indptr, indices, last)
    close(o4, l4, eo, el)
    w.begin_forward(indptr, indices, last, HQ, HKV, D, PS)
    w.end_forward()


def test_decode_outputs_carry_no_gradient_and_fill_outs_that_require_grad():
    """Written outside autograd on both paths, as FlashInfer's kernels write them (README)."""
    w, q, cache, indptr, indices, last = planned()
    out = torch.empty(3, HQ, D, dtype=torch.float16).requires_grad_()
    lse = torch.empty(3, HQ).requires_grad_()
    res = w.run(q, cache, out=out, lse=lse, return_lse=True)
    assert res[0] is out and res[1] is lse
    eo, el = expected(q, cache, indptr, indices, last)
    close(out.detach(), lse.detach(), eo, el)
    # and outputs it allocates carry no gradient, as on the GPU path
    q, k = q.requires_grad_(), torch.randn(9, HKV, D, dtype=torch.float16, requires_grad=True)
    for o in (w.run(q, cache), *aotinfer.single_decode_with_kv_cache(q[0], k, k, return_lse=True)):
        assert not o.requires_grad and o.grad_fn is None


def test_sinks_q_len_and_fp8():
    q, cache, indptr, indices, last = make_batch([5, 17, 33], q_len=4, dtype=torch.float8_e4m3fn)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, HQ, HKV, D, PS, q_len_per_req=4, kv_data_type=torch.float8_e4m3fn)
    sinks = _randn((HQ,), 9, torch.bfloat16)
    out, lse = w.run(q, cache, sinks=sinks, k_scale=0.5, v_scale=2.0, return_lse=True)
    eo, el = expected(
        q, cache, indptr, indices, last, q_len=4, sinks=sinks.float(), k_scale=0.5, v_scale=2.0
    )
    close(out, lse, eo, el)


def test_non_contiguous_q_slice_of_fused_qkv():
    w, q, cache, indptr, indices, last = planned()
    qkv = torch.zeros(3, HQ + 2 * HKV, D, dtype=torch.float16)
    qkv[:, :HQ] = q
    q_view = qkv[:, :HQ]
    assert not q_view.is_contiguous()
    close(w.run(q_view, cache), None, expected(q, cache, indptr, indices, last)[0], None)


# ---------------------------------------------------------------- single decode


def test_single_decode_errors():
    q, k, v = _randn((8, 64), 1), _randn((20, 2, 64), 2), _randn((20, 2, 64), 3)
    with pytest.raises(KeyError, match="Invalid kv_layout nhd"):
        aotinfer.single_decode_with_kv_cache(q, k, v, kv_layout="nhd")
    with pytest.raises(KeyError, match="Invalid pos_encoding_mode rope"):
        aotinfer.single_decode_with_kv_cache(q, k, v, pos_encoding_mode="rope")
    with pytest.raises(
        ValueError, match=r"num_qo_heads \(8\) must be a multiple of num_kv_heads \(3\)"
    ):
        aotinfer.single_decode_with_kv_cache(
            q, k[:, :1].expand(20, 3, 64), v[:, :1].expand(20, 3, 64)
        )
    with pytest.raises(ValueError, match="q's head_dim 32 is not built"):
        aotinfer.single_decode_with_kv_cache(q[:, :32], k[..., :32], v[..., :32])
    with pytest.raises(ValueError, match="k has head_dim 128 but q has head_dim 64"):
        aotinfer.single_decode_with_kv_cache(q, torch.cat([k, k], -1), torch.cat([v, v], -1))
    with pytest.raises(ValueError, match="v must have k's shape and dtype"):
        aotinfer.single_decode_with_kv_cache(q, k, v[:5])
    with pytest.raises(ValueError, match="k must be the query dtype"):
        aotinfer.single_decode_with_kv_cache(q, k.float(), v.float())
    with pytest.raises(ValueError, match="q must be float16 or bfloat16"):
        aotinfer.single_decode_with_kv_cache(q.float(), k, v)
    with pytest.raises(ValueError, match="q must be a 2-D tensor"):
        aotinfer.single_decode_with_kv_cache(q[None], k, v)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_single_decode_matches_reference(layout):
    q, k, v = _randn((8, 64), 1), _randn((33, 2, 64), 2), _randn((33, 2, 64), 3)
    kk, vv = (k, v) if layout == "NHD" else (k.transpose(0, 1), v.transpose(0, 1))
    out, lse = aotinfer.single_decode_with_kv_cache(
        q,
        kk,
        vv,
        kv_layout=layout,
        pos_encoding_mode="ALIBI",
        window_left=9,
        return_lse=True,
        use_tensor_cores=True,
    )
    eo, el = ref.attention(
        q[None],
        k,
        v,
        pos_encoding_mode="ALIBI",
        window_left=9,
        alibi_slopes=aotinfer._attention_utils.get_alibi_slopes(8),
    )
    assert out.shape == (8, 64) and out.dtype == torch.float16 and lse.shape == (8,)
    close(out, lse, eo[0], el[0])
    assert isinstance(
        aotinfer.single_decode_with_kv_cache(q, kk, vv, kv_layout=layout), torch.Tensor
    )


# ---------------------------------------------------------------- provider path (simulated)


def test_provider_path_copies_a_q_the_kernels_cannot_load(monkeypatch):
    """The kernels load q in 16-byte vectors (the provider refuses strides or a start that
    are not multiples of 8 elements): run() copies a q of such strides, single decode any
    such q, as their docstrings say (run()'s q must start on 16 bytes: the provider's
    error otherwise, which the simulated provider does not model)."""
    decode_contract.install(monkeypatch)
    w, q, cache, indptr, indices, last = planned()
    k, v = cache[:3, 0].reshape(-1, HKV, D), cache[:3, 1].reshape(-1, HKV, D)
    want = ref.single_decode(q[0], k, v)[0].to(q.dtype)
    for width, start in ((D + 4, 0), (D + 8, 4)):  # strides of 68 elements; a start at 4
        wide = torch.zeros(q.size(0), HQ, width, dtype=q.dtype)
        wide[:, :, start : start + D] = q
        q_view = wide[:, :, start : start + D]
        close(aotinfer.single_decode_with_kv_cache(q_view[0], k, v), None, want, None)
    q_view = torch.zeros(q.size(0), HQ, D + 4, dtype=q.dtype)[:, :, :D]
    q_view.copy_(q)
    close(w.run(q_view, cache), None, expected(q, cache, indptr, indices, last)[0], None)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("min_chunk", [1, 256])
def test_provider_path_splits_and_matches_reference(monkeypatch, layout, min_chunk):
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", min_chunk)
    for cost in ("ROUND_OVERHEAD_TOKENS", "MERGE_TOKENS", "MERGE_TOKENS_PER_SPLIT"):
        monkeypatch.setattr(_decode_plan, cost, 0)  # free splits: the tiny batch splits
    fake = decode_contract.install(monkeypatch, num_sms=4)
    q, cache, indptr, indices, last = make_batch([1, 17, 200, 2], layout=layout)
    ws = workspace()
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, layout)
    w.plan(indptr, indices, last, HQ, HKV, D, PS, pos_encoding_mode="ROPE_LLAMA", window_left=40)
    out = torch.empty(4, HQ, D, dtype=torch.float16)
    lse = torch.empty(4, HQ)
    sinks = torch.linspace(-1, 1, HQ)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", None)  # run() must allocate nothing when given out/lse
    w.run(q, cache, out=out, lse=lse, sinks=sinks, q_scale=0.5)
    monkeypatch.setattr(torch, "empty", real_empty)
    name, args = fake.calls[-1]
    assert name == "batch_decode"
    if min_chunk == 1:
        assert args["max_splits"] > 1
        ws_lo, ws_hi = ws.data_ptr(), ws.data_ptr() + ws.numel()
        for t in (args["partial_out"], args["partial_lse"]):
            assert ws_lo <= t.data_ptr() and t.data_ptr() + t.numel() * 4 <= ws_hi
            assert (t.data_ptr() - ws_lo) % 256 == 0
    else:
        assert args["max_splits"] == 1 and args["partial_out"] is None
    assert args["sm_scale"] == pytest.approx(0.5 / math.sqrt(D))
    assert args["kv_layout"] == (0 if layout == "NHD" else 1) and args["pos_encoding_mode"] == 1
    eo, el = expected(
        q,
        cache,
        indptr,
        indices,
        last,
        layout,
        pos_encoding_mode="ROPE_LLAMA",
        window_left=40,
        sinks=sinks,
        q_scale=0.5,
    )
    close(out, lse, eo, el)


def test_provider_path_cuda_graph_replan_keeps_the_launch(monkeypatch):
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 1)
    fake = decode_contract.install(monkeypatch, num_sms=4)
    ip, ix, lp = (
        torch.zeros(4, dtype=torch.int32),
        torch.zeros(40, dtype=torch.int32),
        torch.zeros(3, dtype=torch.int32),
    )
    w = aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(), ip, ix, lp)
    launches = []
    for seed, lens in enumerate([[1, 17, 40], [200, 3, 9], [16 * 38, 1, 1]]):
        q, cache, indptr, indices, last = make_batch(
            lens, seed=seed, spare_pages=50 - sum(-(-n // PS) for n in lens)
        )
        w.plan(indptr, indices, last, HQ, HKV, D, PS)
        out = w.run(q, cache)
        args = fake.calls[-1][1]
        launches.append(
            (
                args["chunk_pages"],
                args["max_splits"],
                args["indptr"].data_ptr(),
                args["indices"].data_ptr(),
                args["partial_out"].data_ptr(),
            )
        )
        assert args["indices"] is ix and args["indptr"] is ip and args["last_page_len"] is lp
        close(out, None, expected(q, cache, indptr, indices, last)[0], None)
    assert launches[0] == launches[1] == launches[2]
    chunk, splits = launches[0][:2]
    assert chunk * splits >= ix.numel()  # any table that fits the buffers is covered


@pytest.mark.parametrize(
    "opts",
    [
        dict(pos_encoding_mode="ALIBI", sm_scale=0.3, logits_soft_cap=5.0, window_left=7),
        dict(pos_encoding_mode="ROPE_LLAMA", rope_scale=2.0, rope_theta=5e5),
        dict(),
    ],
)
@pytest.mark.parametrize(
    "call", [(None, 0.5, None, None), (3, None, 1.5, 0.25), (-1, 0.7, 0.9, 1.1), (0, 2, 3, 4)]
)
def test_call_scalars_equal_the_full_check(opts, call):
    """run()'s per-call window and scales over the planned scalars (only those checked) give
    the same values, bit for bit, as checking every option again."""
    window_left, q_scale, k_scale, v_scale = call
    planned = aotinfer._decode_checks.scalars(
        D, opts.get("pos_encoding_mode", "NONE"), opts.get("window_left", -1),
        opts.get("logits_soft_cap"), opts.get("sm_scale"), opts.get("rope_scale"),
        opts.get("rope_theta"), None, None, None,
    )  # fmt: skip
    full = aotinfer._decode_checks.scalars(
        D, opts.get("pos_encoding_mode", "NONE"),
        opts.get("window_left", -1) if window_left is None else window_left,
        opts.get("logits_soft_cap"), opts.get("sm_scale"), opts.get("rope_scale"),
        opts.get("rope_theta"), q_scale, k_scale, v_scale,
    )  # fmt: skip
    fast = aotinfer._decode_checks.call_scalars(planned, window_left, q_scale, k_scale, v_scale)
    assert fast == full and all(type(a) is type(b) for a, b in zip(fast, full))


def test_sinks_of_other_dtypes_and_layouts_are_converted():
    """float32 contiguous sinks pass as they are; float16, bfloat16 and strided ones are
    converted (the same result)."""
    w, q, cache, indptr, indices, last = planned()
    base = torch.linspace(-2, 1, HQ)
    want = w.run(q, cache, sinks=base, return_lse=True)
    for sinks in (base.clone(), torch.stack([base, base], 1)[:, 0]):
        got = w.run(q, cache, sinks=sinks, return_lse=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    half = w.run(q, cache, sinks=base.half(), return_lse=True)
    close(*half, *w.run(q, cache, sinks=base.half().float(), return_lse=True))


def _prepared_launches(fake):
    return [c[0] for c in fake.calls].count("prepared_launch")


def test_run_launches_through_the_plans_prepared_call(monkeypatch):
    """run() prepares the provider's call once per plan, eager/captured launch, cache strides
    and sinks or none, then passes pointers only (and per-call scales, window and sinks);
    a tuple cache and forward()'s options take the full batch_decode call; every path gives
    the reference's result."""
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 1)
    fake = decode_contract.install(monkeypatch, num_sms=16)
    q, cache, indptr, indices, last = make_batch([300])  # one split request: eager != captured
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    eo, el = expected(q, cache, indptr, indices, last)
    for _ in range(3):
        close(*w.run(q, cache, return_lse=True), eo, el)
    close(w.run(q, cache), None, eo, None)  # lse not written: lse pointer 0
    assert fake.prepared == 1 and _prepared_launches(fake) == 4
    fake.capturing = True
    close(*w.run(q, cache, return_lse=True), eo, el)
    fake.capturing = False
    assert fake.prepared == 2  # the captured launch has its own split group
    wide = torch.zeros(cache.shape[0], 3, *cache.shape[2:], dtype=cache.dtype)
    wide[:, :2] = cache
    close(*w.run(q, wide[:, :2], return_lse=True), eo, el)
    assert fake.prepared == 3  # other strides
    # Per-call scales, window and sinks: the prepared call with those values (sinks: one
    # more preparation, a call prepared with them); a tuple cache and forward(): the full call.
    sinks = torch.linspace(-1, 1, HQ)
    opts = dict(q_scale=0.5, k_scale=1.5, v_scale=0.25, window_left=100)
    for kw in (dict(sinks=sinks), opts, dict(sinks=sinks, **opts)):
        want = expected(q, cache, indptr, indices, last, **kw)
        close(*w.run(q, cache, return_lse=True, **kw), *want)
    assert fake.prepared == 4 and _prepared_launches(fake) == 9
    close(w.run(q, (cache[:, 0], cache[:, 1])), None, eo, None)
    close(w.forward(q, cache, v_scale=2.0), None, 2.0 * eo, None)
    assert _prepared_launches(fake) == 9 and fake.calls[-1][0] == "batch_decode"
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    w.run(q, cache)
    assert fake.prepared == 5  # a new plan prepares anew


def test_prepared_launch_switch(monkeypatch):
    """AOTINFER_DECODE_PREPARED=off (read by plan()) makes run() pass every view on every
    call, with the same result; a value other than on/off is refused by plan()."""
    fake = decode_contract.install(monkeypatch)
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    monkeypatch.setenv("AOTINFER_DECODE_PREPARED", "off")
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    off = w.run(q, cache, return_lse=True)
    assert fake.prepared == 0 and _prepared_launches(fake) == 0
    monkeypatch.setenv("AOTINFER_DECODE_PREPARED", "on")
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    on = w.run(q, cache, return_lse=True)
    assert fake.prepared == 1 and _prepared_launches(fake) == 1
    assert torch.equal(on[0], off[0]) and torch.equal(on[1], off[1])
    monkeypatch.setenv("AOTINFER_DECODE_PREPARED", "sometimes")
    with pytest.raises(ValueError, match="PREPARED must be on or off, got 'sometimes'"):
        w.plan(indptr, indices, last, HQ, HKV, D, PS)


def test_provider_path_fixed_split_and_disabled_split(monkeypatch):
    fake = decode_contract.install(monkeypatch)
    q, cache, indptr, indices, last = make_batch([100, 17])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, HQ, HKV, D, PS, fixed_split_size=2)
    w.run(q, cache)
    assert (fake.calls[-1][1]["chunk_pages"], fake.calls[-1][1]["max_splits"]) == (2, 4)
    w.plan(indptr, indices, last, HQ, HKV, D, PS, disable_split_kv=True)
    out = w.run(q, cache)
    assert fake.calls[-1][1]["max_splits"] == 1
    close(out, None, expected(q, cache, indptr, indices, last)[0], None)
    small = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(4096), use_tensor_cores=True)
    with pytest.raises(ValueError, match="fixed_split_size=1 pages .* at most"):
        small.plan(indptr, indices, last, HQ, HKV, D, PS, fixed_split_size=1)


@pytest.mark.parametrize("chunk", [1, 3, 8, 40, 1 << 20])
def test_provider_path_work_list_with_two_row_blocks(monkeypatch, chunk):
    """Forced cuts of the work list with 4 query rows per request and 64/8 heads (two 16-row
    blocks per KV head, each its own merge counter), a window and the LSE: the simulated
    provider checks the work list and the counters, the result matches the reference."""
    real = _decode_plan.plan_work
    monkeypatch.setattr(
        _decode_plan, "plan_work", lambda *a, **k: real(*a, **dict(k, force_chunk=chunk))
    )
    fake = decode_contract.install(monkeypatch, num_sms=8)
    hq, hkv, q_len = 64, 8, 4
    q, cache, indptr, indices, last = make_batch(
        [500, 4, 16, 17, 300, 208], hq=hq, hkv=hkv, q_len=q_len, seed=chunk
    )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, hq, hkv, D, PS, q_len_per_req=q_len, window_left=150)
    out, lse = w.run(q, cache, return_lse=True)
    assert fake.calls[-1][1]["arrivals"].numel() >= 6 * 2 * hkv
    eo, el = expected(q, cache, indptr, indices, last, q_len=q_len, window_left=150)
    close(out, lse, eo, el)


@pytest.mark.parametrize("lens", [[2000, 40, 300, 17, 4, 5], [900, 900, 5, 600]])
def test_provider_path_runs_of_entries(monkeypatch, lens):
    """Runs of entries forced (AOTINFER_DECODE_WORK_RUNS=always) on a small card, two 16-row
    blocks per KV head, a window and the LSE: the simulated provider gets an (items, entries,
    4) list whose runs cover every page once, and the result matches the reference."""
    monkeypatch.setenv("AOTINFER_DECODE_WORK_RUNS", "always")
    # 43 SMs x 3 resident CTAs at d64 = 129 slots: 8 groups of 16 CTAs a wave
    fake = decode_contract.install(monkeypatch, num_sms=43)
    hq, hkv, q_len = 64, 8, 4
    q, cache, indptr, indices, last = make_batch(lens, hq=hq, hkv=hkv, q_len=q_len, seed=len(lens))
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, hq, hkv, D, PS, q_len_per_req=q_len, window_left=150)
    out, lse = w.run(q, cache, return_lse=True)
    work = fake.calls[-1][1]["work"]
    assert work.dim() == 3 and work.shape[1] > 1
    eo, el = expected(q, cache, indptr, indices, last, q_len=q_len, window_left=150)
    close(out, lse, eo, el)


def test_split_single_request_merges_in_grid_when_eager_and_in_the_merge_kernel_when_captured(
    monkeypatch,
):
    """One request split over the grid: an eager call passes the merge counters (one launch,
    the merge in the grid: host time), a call under capture passes none (the provider's
    merge kernel: GPU time); both give the reference's result. Batch 2 merges in the grid
    either way."""
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 1)
    for cost in ("ROUND_OVERHEAD_TOKENS", "MERGE_TOKENS", "MERGE_TOKENS_PER_SPLIT"):
        monkeypatch.setattr(_decode_plan, cost, 0)
    fake = decode_contract.install(monkeypatch, num_sms=16)
    for lens in ([300], [300, 40]):
        q, cache, indptr, indices, last = make_batch(lens)
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
        w.plan(indptr, indices, last, HQ, HKV, D, PS)
        eo, el = expected(q, cache, indptr, indices, last)
        seen = []
        for capturing in (False, True):
            fake.capturing = capturing
            out, lse = w.run(q, cache, return_lse=True)
            args = fake.calls[-1][1]
            assert args["max_splits"] > 1 or args["work"] is not None
            seen.append(args["arrivals"] is not None)
            close(out, lse, eo, el)
        assert seen == ([True, False] if len(lens) == 1 else [True, True])
    fake.capturing = False


@pytest.mark.parametrize("lens", [[300], [300, 40]])
def test_reset_workspace_buffer_moves_the_launch_to_the_new_buffer(monkeypatch, lens):
    """After reset_workspace_buffer every run() (eager and captured, so both split argument
    groups plan() prepared) writes its partial states into the new buffer."""
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 1)
    for cost in ("ROUND_OVERHEAD_TOKENS", "MERGE_TOKENS", "MERGE_TOKENS_PER_SPLIT"):
        monkeypatch.setattr(_decode_plan, cost, 0)
    fake = decode_contract.install(monkeypatch, num_sms=16)
    q, cache, indptr, indices, last = make_batch(lens)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    new = workspace()
    w.reset_workspace_buffer(new, None)
    lo, hi = new.data_ptr(), new.data_ptr() + new.numel()
    for capturing in (False, True):
        fake.capturing = capturing
        out = w.run(q, cache)
        args = fake.calls[-1][1]
        assert args["max_splits"] > 1 or args["work"] is not None
        for t in (args["partial_out"], args["partial_lse"]):
            assert lo <= t.data_ptr() and t.data_ptr() + t.numel() * 4 <= hi
        close(out, None, expected(q, cache, indptr, indices, last)[0], None)
    fake.capturing = False


def test_provider_path_workspace_bounds_splits(monkeypatch):
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 1)
    for cost in ("ROUND_OVERHEAD_TOKENS", "MERGE_TOKENS", "MERGE_TOKENS_PER_SPLIT"):
        monkeypatch.setattr(_decode_plan, cost, 0)  # free splits: as many as the workspace holds
    fake = decode_contract.install(monkeypatch, num_sms=64)
    q, cache, indptr, indices, last = make_batch([16 * 40])
    need = _decode_plan.partial_bytes(1, 3, HQ, D)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(need))
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    assert w._plan.split.max_splits == 3
    out = w.run(q, cache)
    close(out, None, expected(q, cache, indptr, indices, last)[0], None)
    assert fake.calls[-1][1]["max_splits"] == 3
    big = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    assert big.workspace_size(indptr, indices, last, HQ, HKV, D, PS)[0] > need
    big.plan(indptr, indices, last, HQ, HKV, D, PS)
    assert big._plan.split.max_splits > 3
    big.reset_workspace_buffer(workspace(), None)  # same size: carved again
    close(big.run(q, cache), None, expected(q, cache, indptr, indices, last)[0], None)
    with pytest.raises(ValueError, match="call plan\\(\\) again"):
        big.reset_workspace_buffer(workspace(1024), None)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kv_len", [5, 1000, 4096, 777])
def test_provider_path_single_decode(monkeypatch, layout, kv_len):
    monkeypatch.setattr(_decode_plan, "MIN_CHUNK_TOKENS", 64)
    fake = decode_contract.install(monkeypatch, num_sms=8)
    q, k, v = _randn((8, 64), 1), _randn((kv_len, 2, 64), 2), _randn((kv_len, 2, 64), 3)
    kk, vv = (k, v) if layout == "NHD" else (k.transpose(0, 1), v.transpose(0, 1))
    out, lse = aotinfer.single_decode_with_kv_cache(
        q, kk, vv, kv_layout=layout, return_lse=True, logits_soft_cap=7.0
    )
    args = fake.calls[-1][1]
    if kv_len == 5:
        assert args["indptr"] is None and args["kv_len_scalar"] == 5 and args["max_splits"] == 1
    else:
        # split-KV over the contiguous keys: no page table, chunks of whole 64-key rounds
        assert args["indptr"] is None and args["kv_len_scalar"] == kv_len
        assert args["max_splits"] > 1 and args["chunk_pages"] % 64 == 0
        assert (
            (args["max_splits"] - 1) * args["chunk_pages"]
            < kv_len
            <= args["max_splits"] * args["chunk_pages"]
        )
    eo, el = ref.attention(q[None], k, v, logits_soft_cap=7.0)
    close(out, lse, eo[0], el[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn])
def test_cache_half_views_equal_the_sliced_views(dtype):
    from aotinfer import _decode_launch, _views

    cache = torch.zeros(9, 2, 16, 4, 64).to(dtype)[1:8]  # an offset, non-zero storage start
    k_view, v_view = _decode_launch.cache_half_views(
        cache.data_ptr(), cache.shape, cache.stride(), _views.DTYPE_CODES[dtype],
        cache.element_size(), cache.get_device(),
    )  # fmt: skip
    for got, half in ((k_view, cache[:, 0]), (v_view, cache[:, 1])):
        want = _views.view(half)
        assert (got[0], got[1], tuple(got[2]), tuple(got[3])) == want[:4]
        assert got[4] == (-1 if want[4] is None else want[4])  # CPU: no index


# ---------------------------------------------------------------- input edges (session 49)


def test_a_device_page_table_still_needs_a_cache_of_one_page(monkeypatch):
    """A table on the device goes unread by plan(), but every request has a page: run()
    refuses an empty cache (the kernels clamp ids into [0, num_pages), so 0 pages would put
    page -1 before the cache's start), on the provider path before any launch."""
    i32 = dict(dtype=torch.int32)
    on_device = torch.zeros(5, device="meta", **i32)  # stands for a CUDA tensor: not read
    *_, max_page_id = aotinfer._decode_checks.host_page_table(
        torch.tensor([0, 2, 5], **i32), on_device, torch.tensor([3, 16], **i32), PS, 1
    )
    assert max_page_id == 0
    fake = decode_contract.install(monkeypatch)
    w, q, cache, *_ = planned()
    w._plan.max_page_id, w._plan.page_ids_read = 0, False  # as plan() leaves a device table
    calls = len(fake.calls)
    with pytest.raises(ValueError, match="0 pages but .* uses pages \\(its ids, on the device"):
        w.run(q, cache[:0])
    assert len(fake.calls) == calls
    w.run(q, cache)  # one page or more: the kernels' clamp lands in the cache


def test_scales_must_fit_float32():
    """The kernels take float32 scales: a larger finite double would arrive as inf and turn
    every output to NaN (inf * tanh(0))."""
    for opt in ("logits_soft_cap", "sm_scale", "rope_theta"):
        with pytest.raises(ValueError, match=f"{opt} must be .*finite as a float32.*got 1e"):
            planned(**{opt: 1e39})
    w, q, cache, *_ = planned(logits_soft_cap=3e38)  # float32's largest range: accepted
    assert not torch.isnan(w.run(q, cache)).any()
    k = v = cache[:3, 0].reshape(-1, HKV, D)
    with pytest.raises(ValueError, match="v_scale must be positive and finite as a float32"):
        aotinfer.single_decode_with_kv_cache(q[0], k, v, v_scale=1e39)


def test_numpy_integers_and_huge_windows_are_ints():
    """Geometry from a model config often arrives as NumPy integers (and scales as NumPy
    floats); a window past int64
    (the kernels' type) means what any window wider than the cache means: every key."""
    np = pytest.importorskip("numpy")
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, np.int64(HQ), np.int32(HKV), np.int64(D), np.int64(PS))
    close(w.run(q, cache), None, expected(q, cache, indptr, indices, last)[0], None)
    assert w.workspace_size(indptr, indices, last, np.int64(HQ), HKV, D, np.int64(PS))[1] == 0
    w.plan(indptr, indices, last, HQ, HKV, D, PS, window_left=2**70)
    assert w._plan.default_scalars.window_left == 2**63 - 1
    close(w.run(q, cache), None, expected(q, cache, indptr, indices, last)[0], None)
    with pytest.raises(ValueError, match="window_left must be an int >= -1"):
        w.run(q, cache, window_left=np.float64(3.0))
    # NumPy floats are floats for the scales, as for sm_scale and the soft cap
    scales = dict(q_scale=0.5, k_scale=1.5, v_scale=0.25)
    want = w.run(q, cache, **scales)
    assert torch.equal(w.run(q, cache, **{k: np.float32(v) for k, v in scales.items()}), want)


def test_strided_page_tables_on_the_wrappers_device_reach_the_kernels_dense(monkeypatch):
    """int32 tables already on the wrapper's device pass plan() as they are; strided ones
    (a column of a larger tensor) are made contiguous there, as the launcher needs."""
    fake = decode_contract.install(monkeypatch)
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    ip, ix, lp = (torch.stack([t, t], 1)[:, 0] for t in (indptr, indices, last))
    assert not ip.is_contiguous()
    w.plan(ip, ix, lp, HQ, HKV, D, PS)
    close(w.run(q, cache), None, expected(q, cache, indptr, indices, last)[0], None)
    assert fake.calls[-1][0] == "batch_decode"


def test_a_cache_of_unaligned_strides_is_refused_naming_it(monkeypatch):
    """The kernels read the cache in 16-byte rows. A cache whose strides are not multiples
    of 16 bytes (a head_dim slice of a wider buffer) is refused on the provider path with
    its strides, 5-D or tuple, prepared or not; single decode copies such k / v instead,
    as it copies q."""
    fake = decode_contract.install(monkeypatch)
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    wide = torch.zeros(*cache.shape[:-1], D + 4, dtype=cache.dtype)
    wide[..., :D] = cache
    sliced = wide[..., :D]
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr, indices, last, HQ, HKV, D, PS)
    calls = len(fake.calls)
    for c in (sliced, (sliced[:, 0], sliced[:, 1])):
        with pytest.raises(ValueError, match="paged_kv_cache.* must have every stride but the"):
            w.run(q, c)
    with pytest.raises(ValueError, match="every stride but the last a multiple of 16 bytes"):
        w.forward(q, sliced)  # the full call (not prepared)
    assert len(fake.calls) == calls
    k, v = wide[:3, 0].reshape(-1, HKV, D + 4), wide[:3, 1].reshape(-1, HKV, D + 4)
    k, v = k[..., :D], v[..., :D]
    want = ref.single_decode(q[0], k, v)[0].to(q.dtype)
    close(aotinfer.single_decode_with_kv_cache(q[0], k, v), None, want, None)
    offset = torch.zeros(q[0].numel() + 4, dtype=q.dtype)[4:].view(HQ, D)  # off 16 bytes
    offset.copy_(q[0])
    close(aotinfer.single_decode_with_kv_cache(offset, k, v), None, want, None)


def test_a_refused_workspace_swap_says_what_it_did():
    w, q, cache, indptr, indices, last = planned(kv_lens=(4000,), fixed_split_size=None)
    if w._plan.split.max_splits == 1:
        pytest.skip("the plan did not split; nothing to carve")
    with pytest.raises(ValueError, match="the buffers were swapped and the plan dropped"):
        w.reset_workspace_buffer(torch.zeros(64, dtype=torch.uint8), None)
    with pytest.raises(RuntimeError, match="plan\\(\\) must be called"):
        w.run(q, cache)


def test_plan_keeps_its_own_copy_of_the_page_table():
    """run() reads the table plan() analysed, not the caller's tensors (which .to() would
    have returned as they were, being int32 on the wrapper's device already): a caller that
    rewrites them before run() changes nothing until it plans again."""
    w, q, cache, indptr, indices, last = planned()
    want = w.run(q, cache)
    indptr.fill_(1 << 30)  # ranges past the indices: a read past them if the kernels saw it
    indices.fill_(5)
    last.fill_(1)
    close(w.run(q, cache), None, want, None)
    assert w._plan.indptr.data_ptr() != indptr.data_ptr()


def test_utils_enums_name_the_strings_the_functions_take():
    """aotinfer.utils holds FlashInfer's enums (API.md 3.1): their names are the strings the
    functions take, their values the codes the kernels get."""
    from aotinfer import _attention_utils, utils

    assert {m.name: m.value for m in utils.PosEncodingMode} == _attention_utils.POS_ENCODING_MODES
    assert {m.name: m.value for m in utils.TensorLayout} == _attention_utils.KV_LAYOUTS
    assert [m.value for m in utils.MaskMode] == [0, 1, 2, 3]
    assert utils.get_alibi_slopes is _attention_utils.get_alibi_slopes
    w, q, cache, *_ = planned(pos_encoding_mode=utils.PosEncodingMode.ALIBI.name)
    assert w.run(q, cache).shape == q.shape


# ---------------------------------------------------------------- buffers, devices, strides


def test_workspace_and_cuda_graph_buffers_are_checked_naming_them():
    """The workspace and the CUDA-graph buffers: a tensor, contiguous (the strides given
    named), a page-index buffer of one entry or more."""
    with pytest.raises(ValueError, match="float_workspace_buffer must be a torch.Tensor, got list"):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper([0] * 64)
    with pytest.raises(
        ValueError, match=re.escape("float_workspace_buffer must be contiguous, got strides (2,)")
    ):
        aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace()[::2])
    ip, ix, lp = (torch.zeros(n, dtype=torch.int32) for n in (5, 64, 4))
    with pytest.raises(
        ValueError, match=re.escape("paged_kv_indptr_buffer must be contiguous, got strides (2,)")
    ):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(
            workspace(), torch.zeros(10, dtype=torch.int32)[::2], ix, lp
        )
    with pytest.raises(
        ValueError,
        match="paged_kv_indices_buffer must hold at least one page index, got 0 entries",
    ):
        aotinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(), ip, ix[:0], lp)


def test_reset_workspace_buffer_checks_both_buffers_and_the_device():
    w, q, cache, *_ = planned()
    want = w.run(q, cache)
    with pytest.raises(ValueError, match="float_workspace_buffer must be a torch.Tensor, got int"):
        w.reset_workspace_buffer(0, None)
    with pytest.raises(
        ValueError, match=re.escape("int_workspace_buffer must be contiguous, got strides (2,)")
    ):
        w.reset_workspace_buffer(workspace(), workspace(1024)[::2])
    with pytest.raises(ValueError, match="float_workspace_buffer must stay on cpu, got meta"):
        w.reset_workspace_buffer(torch.zeros(64, dtype=torch.uint8, device="meta"), None)
    int_ws = workspace(1024)
    w.reset_workspace_buffer(workspace(), int_ws)  # an unsplit plan: nothing to carve
    assert w._int_workspace_buffer is int_ws
    assert torch.equal(w.run(q, cache), want)
    fresh = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    fresh.reset_workspace_buffer(workspace(), None)  # no plan yet
    with pytest.raises(RuntimeError, match="plan\\(\\) must be called before run\\(\\)"):
        fresh.run(q, cache)


def test_reset_workspace_buffer_recarves_a_split_cpu_plan():
    """A split plan on CPU (the nominal 132 SMs split one long request) carves its partial
    buffers from the new workspace; run() gives the same result."""
    w, q, cache, indptr, indices, last = planned(kv_lens=(4000,))
    assert w._plan.split.max_splits > 1
    want = w.run(q, cache)
    new = workspace()
    w.reset_workspace_buffer(new, None)
    lo, hi = new.data_ptr(), new.data_ptr() + new.numel()
    for t in (w._plan.partial_out, w._plan.partial_lse):
        assert lo <= t.data_ptr() and t.data_ptr() + t.numel() * 4 <= hi
    assert torch.equal(w.run(q, cache), want)
    close(want, None, expected(q, cache, indptr, indices, last)[0], None)


def test_head_counts_past_the_merge_grid_and_grids_past_one_launch_are_refused():
    """Found by a bad-input sweep: num_qo_heads=2**62 hung plan() in its cost model, and
    2**31 sized ALiBi slopes past the host's memory. Head counts past the merge kernels'
    grid.y (65535) and batches past one launch's grid.x are refused before anything is sized
    by them, on both decodes; so are page tables on a device that holds no values."""
    at_most = "must be at most 65535 (the merge kernels' grid.y holds the heads), got "
    with pytest.raises(ValueError, match=re.escape(f"num_qo_heads {at_most}{2**62}")):
        _plan(hq=2**62)
    with pytest.raises(ValueError, match=re.escape(f"num_kv_heads {at_most}65536")):
        _plan(hq=8, hkv=2**16)
    k = _randn((3, 1, 64), 1)
    with pytest.raises(ValueError, match=re.escape(f"num_qo_heads {at_most}65536")):
        aotinfer.single_decode_with_kv_cache(_randn((2**16, 64), 2), k, k)
    n, i32 = 2**16 + 1, dict(dtype=torch.int32)
    table = (torch.arange(n + 1, **i32), torch.arange(n, **i32), torch.ones(n, **i32))
    text = (
        "batch_size 65537 x num_kv_heads 32768 x 1 blocks of 16 query rows = 2147516416 "
        "CTAs, more than one launch holds (2147483647); plan the batch in parts"
    )
    with pytest.raises(ValueError, match=re.escape(text)):
        _plan(table=table, hq=2**15, hkv=2**15, ps=1)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    with pytest.raises(ValueError, match=re.escape(text)):  # (it runs plan()'s planner)
        w.workspace_size(*table, 2**15, 2**15, 64, 1)
    _, _, indptr, indices, last = make_batch([1, 17, 40])
    for i, name in enumerate(("indptr", "indices", "last_page_len")):
        bad = [indptr, indices, last]
        bad[i] = bad[i].to("meta")
        with pytest.raises(
            ValueError, match=f"{name} must be a CUDA or CPU tensor, got device meta"
        ):
            _plan(table=tuple(bad))


def test_run_names_a_numpy_scale():
    """A NumPy array as a scale: run()'s test for per-call options compares by identity
    (a tuple compare ran NumPy's elementwise ==, whose truth value raised unnamed)."""
    w, q, cache, *_ = planned()
    for name in ("q_scale", "k_scale", "v_scale"):
        with pytest.raises(ValueError, match=f"{name} must be a float, got array"):
            w.run(q, cache, **{name: np.array([1.0, 2.0])})


def test_plan_refuses_an_empty_batch_bad_head_counts_and_a_zero_split():
    i32 = dict(dtype=torch.int32)
    with pytest.raises(ValueError, match="indptr must have batch_size \\+ 1 >= 2 entries, got 1"):
        _plan(table=(torch.zeros(1, **i32), torch.zeros(4, **i32), torch.zeros(0, **i32)))
    with pytest.raises(ValueError, match="num_kv_heads must be a positive int, got 0"):
        _plan(hkv=0)
    with pytest.raises(ValueError, match="num_qo_heads must be a positive int, got True"):
        _plan(hq=True)
    with pytest.raises(
        ValueError,
        match=re.escape("q_data_type must be a torch.dtype or its name (e.g. 'float16'), got 5"),
    ):
        _plan(q_data_type=5)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), use_tensor_cores=True)
    for bad in (0, True, 2.0):
        with pytest.raises(
            ValueError, match=f"fixed_split_size must be a positive int \\(pages\\), got {bad!r}"
        ):
            _plan(w, fixed_split_size=bad)


def test_plan_accepts_int64_page_tables():
    """int64 tables reach the kernels as plan()'s own contiguous int32 copies, with the
    int32 tables' result."""
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    w.plan(indptr.long(), indices.long(), last.long(), HQ, HKV, D, PS)
    for t in (w._plan.indptr, w._plan.indices, w._plan.last_page_len):
        assert t.dtype == torch.int32 and t.is_contiguous()
    close(w.run(q, cache), None, expected(q, cache, indptr, indices, last)[0], None)


def test_run_refuses_tensors_on_another_device_and_cache_halves_not_4d():
    w, q, cache, *_ = planned()
    with pytest.raises(ValueError, match="q must be on the wrapper's device cpu, got meta"):
        w.run(q.to("meta"), cache)
    for c in (cache.to("meta"), (cache[:, 0].to("meta"), cache[:, 1].to("meta"))):
        with pytest.raises(
            ValueError, match="paged_kv_cache must be on the wrapper's device cpu, got meta"
        ):
            w.run(q, c)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"each half of paged_kv_cache must be 4-D, got shape ({cache.size(0)}, {HKV}, {D})"
        ),
    ):
        w.run(q, (cache[:, 0, 0], cache[:, 1, 0]))
    aotinfer._decode_checks.check_q(w._plan, q, w.device)  # the planned q passes the full check


def test_run_refuses_outputs_it_cannot_write_and_skip_softmax():
    w, q, cache, *_ = planned()
    with pytest.raises(ValueError, match="out must be a torch.Tensor, got list"):
        w.run(q, cache, out=[0.0] * q.numel())
    strided_out = torch.empty(HQ, 3, D, dtype=torch.float16).transpose(0, 1)
    with pytest.raises(
        ValueError, match=re.escape("out must be contiguous, got strides (64, 192, 1)")
    ):
        w.run(q, cache, out=strided_out)
    with pytest.raises(ValueError, match=re.escape("lse must be contiguous, got strides (1, 3)")):
        w.run(q, cache, lse=torch.empty(HQ, 3).t(), return_lse=True)
    with pytest.raises(
        NotImplementedError, match="skip_softmax_threshold_scale_factor is not supported"
    ):
        w.run(q, cache, skip_softmax_threshold_scale_factor=1.0)


def test_forward_before_plan_is_refused():
    q, cache, *_ = make_batch([3])
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    with pytest.raises(RuntimeError, match="plan\\(\\) must be called before forward\\(\\)"):
        w.forward(q, cache)


# ---------------------------------------------------------------- scales given as tensors


def test_scale_tensor_of_two_elements_is_refused():
    """q/k/v scales: a one-element CPU tensor is its value; two elements, a tensor off the
    CPU (it would sync; a meta tensor stands in for CUDA here), a bool or a complex one are
    refused naming the scale (a complex one was float()'s TypeError)."""
    w, q, cache, *_ = planned()
    with pytest.raises(
        ValueError,
        match=re.escape("q_scale must be a float or a one-element tensor, got shape (2,)"),
    ):
        w.run(q, cache, q_scale=torch.tensor([0.5, 0.5]))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "k_scale must be a Python float (or a CPU tensor); a meta tensor would need a "
            "host-device sync"
        ),
    ):
        w.run(q, cache, k_scale=torch.tensor(0.5, device="meta"))
    with pytest.raises(ValueError, match="v_scale must be a float, got True"):
        w.run(q, cache, v_scale=torch.tensor(True))
    with pytest.raises(ValueError, match=re.escape("v_scale must be a float, got (1+2j)")):
        w.run(q, cache, v_scale=torch.tensor(1 + 2j))
    scales = dict(q_scale=0.5, k_scale=1.5, v_scale=0.25)
    want = w.run(q, cache, **scales)
    as_tensors = {k: torch.tensor([v]) for k, v in scales.items()}
    assert torch.equal(w.run(q, cache, **as_tensors), want)
    k, v = cache[:3, 0].reshape(-1, HKV, D), cache[:3, 1].reshape(-1, HKV, D)
    assert torch.equal(
        aotinfer.single_decode_with_kv_cache(q[0], k, v, **as_tensors),
        aotinfer.single_decode_with_kv_cache(q[0], k, v, **scales),
    )


def test_one_element_tensor_options_are_read_as_the_number_they_hold():
    """logits_soft_cap, sm_scale, rope_scale and rope_theta as one-element tensors are their
    value; a bool or complex one is refused as the scalar is, and so is a meta tensor
    (float() of it was torch's RuntimeError, of a bool tensor 1.0)."""
    w, q, cache, *_ = planned(logits_soft_cap=torch.tensor(5.0), sm_scale=torch.tensor([0.2]))
    assert w._plan.default_scalars.logits_soft_cap == 5.0
    assert w._plan.default_scalars.sm_scale == pytest.approx(0.2)
    want = planned(logits_soft_cap=5.0, sm_scale=float(torch.tensor(0.2)))[0].run(q, cache)
    assert torch.equal(w.run(q, cache), want)
    with pytest.raises(ValueError, match=re.escape("sm_scale must be a float, got tensor(True)")):
        planned(sm_scale=torch.tensor(True))
    with pytest.raises(
        ValueError, match=re.escape("rope_theta must be a float, got tensor(1.+2.j)")
    ):
        planned(rope_theta=torch.tensor(1 + 2j))
    with pytest.raises(
        ValueError,
        match=re.escape("logits_soft_cap must be a float, got tensor(..., device='meta'"),
    ):
        planned(logits_soft_cap=torch.tensor(5.0, device="meta"))
    with pytest.raises(
        ValueError, match=re.escape("rope_scale must be a float, got tensor([1., 2.])")
    ):
        planned(rope_scale=torch.tensor([1.0, 2.0]))


# ---------------------------------------------------------------- single decode edges


def test_single_decode_refuses_kv_on_another_device_and_an_empty_cache():
    q, k, v = _randn((8, 64), 1), _randn((20, 2, 64), 2), _randn((20, 2, 64), 3)
    with pytest.raises(ValueError, match="k must be on cpu like q, got meta"):
        aotinfer.single_decode_with_kv_cache(q, k.to("meta"), v)
    with pytest.raises(ValueError, match="v must be on cpu like q, got meta"):
        aotinfer.single_decode_with_kv_cache(q, k, v.to("meta"))
    for layout, kk, vv in (
        ("NHD", k[:0], v[:0]),
        ("HND", k[:0].transpose(0, 1), v[:0].transpose(0, 1)),
    ):
        with pytest.raises(ValueError, match="k and v must hold at least one key, got kv_len 0"):
            aotinfer.single_decode_with_kv_cache(q, kk, vv, kv_layout=layout)


def test_num_sms_reads_each_devices_count_once(monkeypatch):
    """The provider path's SM count: read from the device's properties once per device (the
    current device for an index-less one). torch.cuda is stood in for here."""
    import functools
    from types import SimpleNamespace

    from aotinfer import _decode_launch

    reads = []

    def properties(index):
        reads.append(index)
        return SimpleNamespace(multi_processor_count=100 + index)

    # A fresh cache of device properties, dropped with the stand-in when the test ends.
    fresh = functools.cache(_decode_launch._device_properties.__wrapped__)
    monkeypatch.setattr(_decode_launch, "_device_properties", fresh)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    devices = [torch.device("cuda", 0), torch.device("cuda"), torch.device("cuda", 1)]
    assert [_decode_launch.num_sms(d) for d in devices * 2] == [100, 101, 101] * 2
    assert reads == [0, 1]


@pytest.mark.parametrize("clusters", [True, False])
def test_uniform_batches_take_the_grid_form_where_clusters_merge(clusters, monkeypatch):
    """Where the provider merges grid splits in clusters (sm_90+, _clusters_merge), plan()
    gives a uniform batch cut into 2..8 pieces the grid form of its work list
    (_decode_plan.uniform_grid); elsewhere, and for a skewed batch, the work list. The
    results are the same (the simulated provider runs both)."""
    fake = decode_contract.install(monkeypatch)
    monkeypatch.setattr(
        aotinfer.BatchDecodeWithPagedKVCacheWrapper, "_clusters_merge", lambda self: clusters
    )
    from aotinfer import _decode_plan

    real = _decode_plan.plan_work
    monkeypatch.setattr(
        _decode_plan, "plan_work", lambda *a, **k: real(*a, **dict(k, force_chunk=2))
    )
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    for lens in ([100, 100, 100], [100, 17, 100]):
        q, cache, indptr, indices, last = make_batch(lens)
        w.plan(indptr, indices, last, HQ, HKV, D, PS)
        split = w._plan.split
        assert (split.work is None) == (clusters and lens[0] == lens[1])
        assert split.max_splits == 4  # 7 pages in pieces of 2 (the grid: 2, 2, 2, 1)
        out, lse = w.run(q, cache, return_lse=True)
        close(out, lse, *expected(q, cache, indptr, indices, last))
        assert fake.calls[-1][1]["max_splits"] == 4
