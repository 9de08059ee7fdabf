"""Bad-input sweep on the CPU: every public function called with one argument at a time
replaced by a wrong value (None, a list, a string, NaN, inf, -1, 0, 2**62, 1.5, True, a
NumPy array; for tensors also other dtypes, a 0-D / 1-D / extra-dimension / empty / shorter
/ longer / transposed / strided / meta / requires_grad copy, and one holding NaN, -1 or a
huge value), each call with a 10 s alarm. It prints every call that did not end in a
ValueError / TypeError / NotImplementedError / AssertionError naming the argument:

    ACCEPT   the call returned (often right: dtypes the CPU path converts, values a kernel
             cannot check without a host sync, flags read for truth as FlashInfer does)
    BADTYPE  another exception (KeyError is FlashInfer's for layouts and modes), or _Slow
    UNNAMED  the right type whose message does not name the argument (often it names the
             argument the value disagrees with)

so the lines need reading, not counting. Session 79's run found plan() hanging on
num_qo_heads=2**62 and being killed for memory at 2**31, and unnamed errors for NumPy
flags and scales (dev/NOTES.md item 111).

    python dev/sweep_bad_inputs.py [NAME ...]     (names of CASES; all by default)
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "cpu"))

from test_decode_api import HKV, HQ, PS, D, make_batch, workspace  # noqa: E402

import aotinfer  # noqa: E402
from aotinfer import sampling  # noqa: E402

B, V = 3, 50
GOOD = (ValueError, TypeError, NotImplementedError, AssertionError)


def _probs():
    return torch.softmax(torch.randn(B, V), -1)


def _with(out: dict, label: str, t: torch.Tensor, value) -> None:
    """out[label]: a copy of ``t`` holding ``value`` first, where its dtype can hold it."""
    if t.numel() == 0:
        return
    t = t.clone()
    try:
        t.view(-1)[0] = value
    except RuntimeError:  # (uint8 and bool hold no -1 or 10**6)
        return
    out[label] = t


def variants(value) -> dict:
    out = {
        "None": None, "list": [1, 2], "str": "x", "nan": float("nan"), "inf": float("inf"),
        "neg": -1, "zero": 0, "bigint": 2**62, "float1.5": 1.5, "True": True,
        "ndarray": np.ones(3, dtype=np.float32),
    }  # fmt: skip
    if not isinstance(value, torch.Tensor):
        return out
    t = value
    for dt in (torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
               torch.bool, torch.uint8, torch.complex64):  # fmt: skip
        if dt != t.dtype:
            out[f"dtype {dt}"] = t.to(dt)
    out["0-D"] = t.reshape(-1)[0].clone() if t.numel() else torch.tensor(0)
    out["unsqueezed"] = t.unsqueeze(0)
    if t.dim() >= 1:
        out["flat"], out["empty"] = t.reshape(-1), t[:0]
        out["shorter"], out["longer"] = t[: max(t.shape[0] - 1, 0)], torch.cat([t, t[:1]])
    if t.dim() >= 2:
        out["transposed"], out["strided"] = t.transpose(0, 1), t[:, ::2]
        out["no columns"] = t[:, :0]
    out["meta"] = t.to("meta")
    if t.is_floating_point():
        out["requires_grad"] = t.clone().requires_grad_(True)
    for label, value in (("has NaN", float("nan")), ("has -1", -1), ("has 10**6", 10**6)):
        if t.is_floating_point() or label != "has NaN":
            _with(out, label, t, value)
    return out


class _Slow(Exception):
    pass


def _alarm(*_):
    raise _Slow()


def outcome(fn, kwargs):
    """None where the call returned, else the exception it raised."""
    signal.alarm(10)
    try:
        fn(**kwargs)
        return None
    except Exception as e:  # the sweep's point: any exception is recorded, none escapes
        return e
    finally:
        signal.alarm(0)


def sweep(name: str, fn, make) -> None:
    base = outcome(fn, make())
    if base is not None:
        print(f"BASE     {name}: the valid call fails: {base!r}")
        return
    for arg, value in make().items():
        for label, bad in variants(value).items():
            kwargs = make()
            kwargs[arg] = bad
            e = outcome(fn, kwargs)
            msg = "" if e is None else str(e).split("\n")[0][:200]
            if e is None:
                flag = "ACCEPT"
            elif not isinstance(e, GOOD):
                flag = "BADTYPE"
            elif arg not in msg:
                flag = "UNNAMED"
            else:
                continue
            what = "returned" if e is None else f"{type(e).__name__}: {msg}"
            print(f"{flag:8s} {name}({arg}={label}) -> {what}", flush=True)


def _decode_cases() -> dict:
    q, cache, indptr, indices, last = make_batch([1, 17, 40])
    table = dict(indptr=indptr, indices=indices, last_page_len=last)

    def plan_and_run(**kw):
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD")
        w.plan(**kw)
        w.run(q, cache)

    def construct_plan_and_run(**kw):
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(**kw)
        w.plan(indptr, indices, last, HQ, HKV, D, PS)
        w.run(q, cache)

    wrapper = aotinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD")
    wrapper.plan(indptr, indices, last, HQ, HKV, D, PS)
    f16, i32 = dict(dtype=torch.float16), dict(dtype=torch.int32)
    return {
        "graph_wrapper": (construct_plan_and_run, lambda: dict(
            float_workspace_buffer=workspace(), kv_layout="NHD", use_cuda_graph=True,
            use_tensor_cores=True, paged_kv_indptr_buffer=torch.zeros(4, **i32),
            paged_kv_indices_buffer=torch.zeros(40, **i32),
            paged_kv_last_page_len_buffer=torch.zeros(3, **i32), backend="auto")),
        "forward": (wrapper.forward, lambda: dict(
            q=q.clone(), paged_kv_cache=cache, pos_encoding_mode="ALIBI", window_left=5,
            logits_soft_cap=10.0, sm_scale=0.1, return_lse=True)),
        "plan": (plan_and_run, lambda: dict(
            {k: v.clone() for k, v in table.items()}, num_qo_heads=HQ, num_kv_heads=HKV,
            head_dim=D, page_size=PS, pos_encoding_mode="NONE", window_left=-1,
            logits_soft_cap=None, q_data_type=torch.float16, fixed_split_size=None,
            disable_split_kv=False)),
        "run": (wrapper.run, lambda: dict(
            q=q.clone(), paged_kv_cache=cache, q_scale=None, k_scale=None, v_scale=None,
            out=torch.empty_like(q), lse=torch.empty(q.shape[:2]), return_lse=False,
            window_left=None, sinks=torch.randn(HQ))),
        "single_decode": (aotinfer.single_decode_with_kv_cache, lambda: dict(
            q=torch.randn(8, 64, **f16), k=torch.randn(33, 2, 64, **f16),
            v=torch.randn(33, 2, 64, **f16), kv_layout="NHD", pos_encoding_mode="ALIBI",
            window_left=10, logits_soft_cap=30.0, k_scale=1.0, v_scale=1.0, sm_scale=0.1,
            return_lse=False, use_tensor_cores=False)),
    }  # fmt: skip


def _other_cases() -> dict:
    i32 = dict(dtype=torch.int32)
    per_row = torch.full((B,), 0.9)
    draft = lambda: torch.softmax(torch.randn(B, 4, V), -1)  # noqa: E731
    return {
        "softmax": (aotinfer.softmax, lambda: dict(
            logits=torch.randn(B, V), temperature=per_row + 0.1)),
        "sampling_from_probs": (aotinfer.sampling_from_probs, lambda: dict(
            probs=_probs(), indices=torch.tensor([0, 1, 2, 1]), seed=1, offset=2)),
        "top_p": (aotinfer.top_p_sampling_from_probs, lambda: dict(probs=_probs(), top_p=per_row)),
        "top_k": (aotinfer.top_k_sampling_from_probs, lambda: dict(
            probs=_probs(), top_k=torch.full((B,), 5, **i32))),
        "min_p": (aotinfer.min_p_sampling_from_probs, lambda: dict(probs=_probs(), min_p=0.1)),
        "joint": (aotinfer.top_k_top_p_sampling_from_probs, lambda: dict(
            probs=_probs(), top_k=5, top_p=0.9, filter_apply_order="joint")),
        "top_p_renorm": (aotinfer.top_p_renorm_probs, lambda: dict(probs=_probs(), top_p=0.9)),
        "top_k_mask": (aotinfer.top_k_mask_logits, lambda: dict(logits=torch.randn(B, V), top_k=5)),
        "chain": (aotinfer.chain_speculative_sampling, lambda: dict(
            draft_probs=draft(), draft_token_ids=torch.randint(0, V, (B, 4)),
            target_probs=torch.softmax(torch.randn(B, 5, V), -1))),
        "top_k_select": (aotinfer.top_k, lambda: dict(input=torch.randn(B, V), k=5, sorted=True)),
        "seed_and_offset": (sampling.get_seed_and_offset, lambda: dict(
            increment=4, generator=torch.Generator())),
        "merge_states": (aotinfer.merge_states, lambda: dict(
            v=torch.randn(4, 3, 2, 8), s=torch.randn(4, 3, 2))),
        "merge_state_in_place": (aotinfer.merge_state_in_place, lambda: dict(
            v=torch.randn(4, 2, 8), s=torch.randn(4, 2), v_other=torch.randn(4, 2, 8),
            s_other=torch.randn(4, 2), mask=torch.tensor([True, False, True, True]))),
        "get_seq_lens": (aotinfer.get_seq_lens, lambda: dict(
            kv_indptr=torch.tensor([0, 2, 5], **i32),
            kv_last_page_len=torch.tensor([3, 4], **i32), page_size=4)),
        "batch_indices_positions": (aotinfer.get_batch_indices_positions, lambda: dict(
            append_indptr=torch.tensor([0, 2, 5], **i32),
            seq_lens=torch.tensor([7, 9], **i32), nnz=5)),
        "append": (aotinfer.append_paged_kv_cache, lambda: dict(
            append_key=torch.randn(5, 2, 64).half(), append_value=torch.randn(5, 2, 64).half(),
            batch_indices=torch.tensor([0, 0, 1, 1, 1], **i32),
            positions=torch.tensor([0, 1, 0, 1, 2], **i32),
            paged_kv_cache=torch.zeros(4, 2, 4, 2, 64).half(),
            kv_indices=torch.tensor([0, 1, 2], **i32), kv_indptr=torch.tensor([0, 1, 3], **i32),
            kv_last_page_len=torch.tensor([2, 3], **i32))),
    }  # fmt: skip


def main() -> None:
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    torch.manual_seed(0)
    cases = {**_other_cases(), **_decode_cases()}
    for name in sys.argv[1:] or list(cases):
        fn, make = cases[name]
        sweep(name, fn, make)


if __name__ == "__main__":
    main()
