"""The sampling family as torch custom ops (namespace ``aotinfer``), so that
``torch.compile(fullgraph=True)`` can trace a function that samples.

Each op has one implementation for every device: CPU tensors go to ``aotinfer.reference``,
CUDA tensors to the provider chosen for their device (imported on first use, never here).
Each op also has a fake implementation that only allocates the outputs. The generator is
an op argument (schema ``Generator?``) and is read and advanced inside the op at run
time, so a compiled graph advances the generator on every call exactly like eager code.
Dynamo cannot pass a ``torch.Generator`` object into a graph: under
``torch.compile(fullgraph=True)`` use ``generator=None`` (the device's default generator)
or explicit ``seed`` / ``offset``; without fullgraph an explicit generator costs a graph
break. Sampling ops carry ``torch.Tag.nondeterministic_seeded`` so the compiler never
merges two identical calls.

In eager mode the public functions call the implementations directly (skipping the
dispatcher's per-call overhead); while dynamo traces them or under a dispatch mode
(FakeTensorMode, make_fx; ``_custom_ops.tracing()``) they call the ops. Both run the same
code. Registration happens at import of this module (about half a millisecond per op;
``aotinfer.sampling`` and ``aotinfer.topk`` import it, ``import aotinfer`` alone does not,
to stay cheap), so a ``torch.export`` program holding ``aotinfer`` ops loads once
``aotinfer.sampling`` is imported. It imports no provider and initialises no CUDA. No
autograd formula is registered: the outputs of a compiled graph carry no gradient (as
FlashInfer's ops).

Every output is allocated here with ``torch.empty`` (the provider never allocates), and
nothing is launched for an empty batch. The CPU / CUDA split asks ``tensor.is_cpu``, not
``tensor.device.type`` (0.09 against 0.53 us per test on the CI machine's CPU,
results/history/device-type-checks-cpu-session24.txt: the eager path's host time).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import torch

from . import _custom_ops, _rng, _views
from ._providers import kernels_for, provider_for
from .reference import sampling as _ref
from .reference import topk as _ref_topk
from .reference.philox import MASK64
from .reference.sampling import FilterMode

# The random-number tail shared by the two seeded ops' schemas.
_RANDOM = (
    "Generator? generator, Tensor? seed_arr, int seed, Tensor? offset_arr, int offset, "
    "bool use_generator"
)


def _define(name: str, schema: str, impl, fake, seeded: bool = False, traced_args=None):
    """Registers ``aotinfer::name`` and returns the function the public API calls.

    ``traced_args(*args) -> args``, where given, rewrites a traced call's arguments before
    the op sees them (the comment above _filled says why)."""
    op = _custom_ops.define(name, schema, impl, fake, seeded)

    def call(*args, **eager_only):
        # eager_only: keyword options of the implementation that the schema does not carry
        # (the compiled op always takes its defaults).
        if _custom_ops.tracing():
            return op(*(traced_args(*args) if traced_args else args))
        return impl(*args, **eager_only)

    call.__name__ = name
    call.op = op
    return call


# In a traced call (torch.compile), a Python int the op takes as an ``int`` argument (a seed
# or offset per step, a top_k per request) would be a constant of the graph: torch
# specialises it, so every new value compiled the graph again, and under fullgraph=True the
# ninth stopped with the recompile limit. Such ints go in as the tensors the ops take anyway
# (a per-row top_k, a seed / offset array of length 1): the same values, so the same tokens
# as the eager call, and a graph input instead of a constant. Floats (temperature, top_p,
# min_p) cannot be helped so: the public functions' range checks make torch specialise a
# float before any op sees it (README: pass them as tensors). Eager calls are left as they
# are (host time).


def _filled(value, n: int, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    return torch.full((n,), value, dtype=dtype, device=like.device)


def _top_k_as_tensor(k_arr, k: int, active: bool, like: torch.Tensor):
    """A scalar top_k in use, as a per-row int32 tensor of ``like``'s rows, and 0 in the
    scalar's place: the op reads the tensor where one is given, and the number itself must
    not reach the op's schema, where torch would specialise it."""
    if k_arr is not None or not active:
        return k_arr, k
    return _filled(k, like.size(0), torch.int32, like), 0


def _seed_as_tensors(seed_arr, seed, offset_arr, offset, use_generator, like):
    """Explicit int seed / offset as int64 arrays of length 1 (each row reads element 0)."""
    if use_generator or seed_arr is not None:
        return seed_arr, seed, offset_arr, offset
    return _filled(seed, 1, torch.int64, like), 0, _filled(offset, 1, torch.int64, like), 0


# ----------------------------------------------------------------------------------------
# softmax


# The split softmax keeps one (max, sum) float pair per row chunk; chunks are at least this
# many elements (kSplitMinChunk in providers/csrc/sampling/softmax_split.cuh).
_SOFTMAX_MIN_CHUNK = 1024


def _probs_and_softmax_workspace(shape, device):
    """The probabilities, their provider view and the softmax's workspace view, from one
    allocation (one call to the caching allocator instead of two: host time).

    The buffer is ``(rows + extra, vocab)`` float32: ``probs`` is its first ``rows`` rows
    (contiguous, at the storage's start), the workspace the floats after them from the next
    16-byte boundary. Both views are built from the buffer's pointer, and no tensor is made
    of the workspace. The former carving (``buf[:n].view(rows, vocab)``, ``buf[start:]``
    and a view() of each) took 9.4-11.1 us per call on the CI machine's CPU against
    4.8-7.3 now, on meta tensors (dev/time_softmax_outputs.py, three runs; dev/NOTES.md
    item 56)."""
    rows, vocab = shape
    index = device.index
    n = rows * vocab
    start = -(-n // 4) * 4
    ws = 2 * rows * -(-vocab // _SOFTMAX_MIN_CHUNK)
    extra = -(-(start - n + ws) // vocab) if vocab else 0
    buf = torch.empty(rows + extra, vocab, dtype=torch.float32, device=device)
    probs = buf[:rows] if extra else buf
    ptr = buf.data_ptr()
    probs_view = _views.matrix_view(ptr, _views.F32_CODE, rows, vocab, index)
    return probs, probs_view, (ptr + 4 * start, _views.F32_CODE, (ws,), (1,), index)


def _softmax_impl(
    logits: torch.Tensor,
    temperature_arr: Optional[torch.Tensor],
    temperature: float,
    enable_pdl: Optional[bool],
) -> torch.Tensor:
    if logits.is_cpu:
        t = temperature_arr if temperature_arr is not None else temperature
        # (layout as the fake says; detached: no output of the family carries a gradient,
        # as on the GPU path)
        return _ref.softmax(logits.detach(), t).contiguous()
    provider = provider_for(logits.device)
    if enable_pdl is None:
        enable_pdl = provider.capability[0] >= 9
    probs, probs_view, workspace_view = _probs_and_softmax_workspace(logits.shape, logits.device)
    provider.kernels.softmax(
        _views.view(logits),
        probs_view,
        _views.view(temperature_arr),
        temperature,
        workspace_view,
        bool(enable_pdl),
        _views.stream_handle(logits.device),
    )
    return probs


def _softmax_fake(logits, temperature_arr, temperature, enable_pdl):
    return logits.new_empty(logits.shape, dtype=torch.float32)


softmax = _define(
    "softmax",
    "(Tensor logits, Tensor? temperature_arr, float temperature, bool? enable_pdl) -> Tensor",
    _softmax_impl,
    _softmax_fake,
)


# ----------------------------------------------------------------------------------------
# sample: every sampler (from probs with any filter, or from logits)


def increment_for(is_logits: bool, filter_mode: int, batch: int, vocab: int) -> int:
    """FlashInfer's generator increment for one call (API.md 1.4)."""
    if is_logits:
        return batch * vocab
    if filter_mode in (FilterMode.NONE, FilterMode.MIN_P):
        return batch
    return batch * 32


def _top_p_draw() -> str:
    """AOTINFER_SAMPLING_TOP_P for the CPU path, so that a pinned draw holds there too (the
    provider reads the same variable); unset: "auto", which draws by rejection."""
    value = os.environ.get("AOTINFER_SAMPLING_TOP_P") or "auto"
    if value not in _ref.TOP_P_DRAWS:
        raise ValueError(
            f"AOTINFER_SAMPLING_TOP_P must be rejection, threshold or auto, got {value!r}"
        )
    return value


def _sample_impl(
    input: torch.Tensor,
    is_logits: bool,
    indices: Optional[torch.Tensor],
    filter_mode: int,
    top_k_arr: Optional[torch.Tensor],
    top_k: int,
    top_p_arr: Optional[torch.Tensor],
    top_p: float,
    min_p_arr: Optional[torch.Tensor],
    min_p: float,
    generator: Optional[torch.Generator],
    seed_arr: Optional[torch.Tensor],
    seed: int,
    offset_arr: Optional[torch.Tensor],
    offset: int,
    use_generator: bool,
    want_valid: bool = True,
):
    """``want_valid=False`` (eager calls whose caller drops ``valid``): no ``valid`` tensor
    is allocated or written, and None takes its place (one allocation less of host time)."""
    device = input.device
    if indices is None:
        batch, out_dtype = input.size(0), torch.int32
    else:
        batch, out_dtype = indices.size(0), indices.dtype
    if use_generator:
        increment = increment_for(is_logits, filter_mode, batch, input.size(1))
        seed, offset = _rng.advance_generator(increment, generator, device)
    if input.is_cpu:
        s = seed_arr if seed_arr is not None else seed
        o = offset_arr if offset_arr is not None else offset
        if is_logits:
            tokens, valid = _ref.sample_from_logits(input, indices, seed=s, offset=o)
        else:
            tokens, valid = _ref.sample_from_probs(
                input,
                indices,
                filter_mode,
                top_k_arr if top_k_arr is not None else top_k,
                top_p_arr if top_p_arr is not None else top_p,
                min_p_arr if min_p_arr is not None else min_p,
                seed=s,
                offset=o,
                # read in top-p mode only, as the provider reads it
                top_p_draw=_top_p_draw() if filter_mode == FilterMode.TOP_P else "auto",
            )
        return tokens.to(out_dtype).contiguous(), valid.contiguous()
    samples = torch.empty(batch, dtype=out_dtype, device=device)
    valid = torch.empty(batch, dtype=torch.bool, device=device) if want_valid else None
    if batch == 0:
        return samples, valid
    v, index = _views.view, device.index
    kernels_for(device).sample(
        v(input), bool(is_logits), v(indices),
        # the outputs' views from what was just allocated (host time: no accessor calls)
        (samples.data_ptr(), _views.DTYPE_CODES[out_dtype], (batch,), (1,), index),
        None if valid is None else (valid.data_ptr(), _views.BOOL_CODE, (batch,), (1,), index),
        int(filter_mode),
        v(top_k_arr), int(top_k), v(top_p_arr), float(top_p), v(min_p_arr), float(min_p),
        v(seed_arr), seed & MASK64, v(offset_arr), offset & MASK64,
        _views.stream_handle(device),
    )  # fmt: skip
    return samples, valid


def _sample_fake(input, is_logits, indices, *rest):
    batch = indices.size(0) if indices is not None else input.size(0)
    out_dtype = indices.dtype if indices is not None else torch.int32
    return input.new_empty((batch,), dtype=out_dtype), input.new_empty((batch,), dtype=torch.bool)


_USES_TOP_K = (FilterMode.TOP_K, FilterMode.TOP_K_THEN_TOP_P, FilterMode.JOINT)


def _sample_traced(input, is_logits, indices, mode, k_arr, k, p_arr, p, m_arr, m, *random):
    k_arr, k = _top_k_as_tensor(k_arr, k, mode in _USES_TOP_K, input)
    generator, seed_arr, seed, offset_arr, offset, use_generator = random
    seeds = _seed_as_tensors(seed_arr, seed, offset_arr, offset, use_generator, input)
    return (input, is_logits, indices, mode, k_arr, k, p_arr, p, m_arr, m, generator, *seeds,
            use_generator)  # fmt: skip


sample = _define(
    "sample",
    "(Tensor input, bool is_logits, Tensor? indices, int filter_mode, Tensor? top_k_arr, "
    "int top_k, Tensor? top_p_arr, float top_p, Tensor? min_p_arr, float min_p, "
    f"{_RANDOM}) -> (Tensor, Tensor)",
    _sample_impl,
    _sample_fake,
    seeded=True,
    traced_args=_sample_traced,
)


# ----------------------------------------------------------------------------------------
# renorm (top-k keeps the dtype; the core casts to float32 for top-p) and top-k mask


def _matrix_like(x: torch.Tensor):
    """A new contiguous matrix of ``x``'s shape, dtype and device, and its provider view
    built from the allocation (_views.matrix_view: no accessor calls on the eager path)."""
    rows, cols = x.shape
    device = x.device
    out = torch.empty(rows, cols, dtype=x.dtype, device=device)
    code = _views.DTYPE_CODES[out.dtype]
    return out, _views.matrix_view(out.data_ptr(), code, rows, cols, device.index)


def _renorm_impl(
    input: torch.Tensor,
    filter_mode: int,
    top_k_arr: Optional[torch.Tensor],
    top_k: int,
    top_p_arr: Optional[torch.Tensor],
    top_p: float,
) -> torch.Tensor:
    if input.is_cpu:
        return _ref.renorm_probs(
            input,
            filter_mode,
            top_k_arr if top_k_arr is not None else top_k,
            top_p_arr if top_p_arr is not None else top_p,
        ).contiguous()
    device = input.device
    out, out_view = _matrix_like(input)
    if out.size(0) == 0:
        return out
    v = _views.view
    kernels_for(device).renorm(
        v(input), out_view, int(filter_mode), v(top_k_arr), int(top_k), v(top_p_arr),
        float(top_p), _views.stream_handle(device),
    )  # fmt: skip
    return out


def _same_shape_fake(input, *rest):
    return input.new_empty(input.shape)


def _renorm_traced(input, mode, k_arr, k, p_arr, p):
    k_arr, k = _top_k_as_tensor(k_arr, k, mode == FilterMode.TOP_K, input)
    return input, mode, k_arr, k, p_arr, p


renorm = _define(
    "renorm",
    "(Tensor input, int filter_mode, Tensor? top_k_arr, int top_k, Tensor? top_p_arr, "
    "float top_p) -> Tensor",
    _renorm_impl,
    _same_shape_fake,
    traced_args=_renorm_traced,
)


def _top_k_mask_impl(
    logits: torch.Tensor, top_k_arr: Optional[torch.Tensor], top_k: int
) -> torch.Tensor:
    if logits.is_cpu:
        k = top_k_arr if top_k_arr is not None else top_k
        return _ref.top_k_mask_logits(logits, k).contiguous()
    device = logits.device
    out, out_view = _matrix_like(logits)
    if out.size(0) == 0:
        return out
    kernels_for(device).top_k_mask(
        _views.view(logits), out_view, _views.view(top_k_arr), int(top_k),
        _views.stream_handle(device),
    )  # fmt: skip
    return out


def _top_k_mask_traced(logits, k_arr, k):
    return logits, *_top_k_as_tensor(k_arr, k, True, logits)


top_k_mask = _define(
    "top_k_mask",
    "(Tensor logits, Tensor? top_k_arr, int top_k) -> Tensor",
    _top_k_mask_impl,
    _same_shape_fake,
    traced_args=_top_k_mask_traced,
)


# ----------------------------------------------------------------------------------------
# top_k selection


def _top_k_select_impl(input: torch.Tensor, k: int, sorted: bool):
    if input.is_cpu:
        values, indices = _ref_topk.top_k(input, k, sorted)
        return values.contiguous(), indices.contiguous()
    rows = input.size(0)
    values = torch.empty((rows, k), dtype=input.dtype, device=input.device)
    indices = torch.empty((rows, k), dtype=torch.int64, device=input.device)
    if rows == 0:
        return values, indices
    kernels_for(input.device).top_k_select(
        _views.view(input), int(k), _views.view(values), _views.view(indices),
        _views.stream_handle(input.device),
    )  # fmt: skip
    if sorted:  # the kernel returns ascending index order, so a stable sort keeps ties so
        order = _ref_topk.descending_order(values)
        values, indices = values.gather(1, order), indices.gather(1, order)
    return values, indices


def _top_k_select_fake(input, k, sorted):
    rows = input.size(0)
    return input.new_empty((rows, k)), input.new_empty((rows, k), dtype=torch.int64)


top_k_select = _define(
    "top_k_select",
    "(Tensor input, int k, bool sorted) -> (Tensor, Tensor)",
    _top_k_select_impl,
    _top_k_select_fake,
)


# ----------------------------------------------------------------------------------------
# chain speculative sampling (adds into accepted / emitted in place)


def _extent(t: torch.Tensor) -> Tuple[int, int]:
    """The bytes [start, end) a non-empty tensor's elements span (strides >= 0)."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _check_counters_apart(counters, inputs) -> None:
    """chain_speculative_sampling adds into its counters while it reads its inputs: a
    counter sharing memory with one (the caller's draft_token_ids[:, 0] passed as
    maybe_output_accepted_token_num, say) would race with the kernel's reads on the GPU.
    Bytes spanned are compared, so a counter interleaved with an input's elements is
    refused too."""
    names = ("maybe_output_accepted_token_num", "maybe_output_emitted_draft_token_num")
    for counter_name, counter in zip(names, counters):
        start, end = _extent(counter)
        for name, t in inputs.items():
            if t is None or t.numel() == 0:
                continue
            if t.untyped_storage().data_ptr() != counter.untyped_storage().data_ptr():
                continue
            t_start, t_end = _extent(t)
            if start < t_end and t_start < end:
                raise ValueError(
                    f"{counter_name} must not share memory with {name} (it is added to in "
                    "place while the inputs are read)"
                )


def _chain_impl(
    draft_probs: torch.Tensor,
    draft_ids: torch.Tensor,
    target_probs: torch.Tensor,
    accepted: torch.Tensor,
    emitted: torch.Tensor,
    generator: Optional[torch.Generator],
    seed_arr: Optional[torch.Tensor],
    seed: int,
    offset_arr: Optional[torch.Tensor],
    offset: int,
    use_generator: bool,
) -> torch.Tensor:
    batch, n, _ = draft_probs.shape
    device = draft_probs.device
    # Here, not only in the public function, so that a compiled graph checks it too (with
    # real tensors): both counters are added to in place, so one buffer would get both sums.
    if batch and abs(accepted.data_ptr() - emitted.data_ptr()) < batch * accepted.element_size():
        raise ValueError(
            "maybe_output_accepted_token_num and maybe_output_emitted_draft_token_num must be "
            "separate tensors (both are added to in place), got overlapping ones"
        )
    if batch:
        _check_counters_apart(
            (accepted, emitted),
            dict(
                draft_probs=draft_probs, draft_token_ids=draft_ids, target_probs=target_probs,
                seed=seed_arr, offset=offset_arr,
            ),
        )  # fmt: skip
    if use_generator:
        seed, offset = _rng.advance_generator(batch * (n + 1), generator, device)
    if draft_probs.is_cpu:
        out, acc, emi = _ref.chain_speculative_sampling(
            draft_probs,
            draft_ids,
            target_probs,
            seed=seed_arr if seed_arr is not None else seed,
            offset=offset_arr if offset_arr is not None else offset,
        )
        accepted.add_(acc)
        emitted.add_(emi)
        return out.contiguous()
    out = torch.empty((batch, n + 1), dtype=torch.int32, device=device)
    if batch == 0:
        return out
    v = _views.view
    kernels_for(device).chain_speculative(
        v(draft_probs), v(draft_ids), v(target_probs), v(out), v(accepted), v(emitted),
        v(seed_arr), seed & MASK64, v(offset_arr), offset & MASK64, _views.stream_handle(device),
    )  # fmt: skip
    return out


def _chain_fake(draft_probs, draft_ids, target_probs, accepted, emitted, *rest):
    batch, n, _ = draft_probs.shape
    return draft_probs.new_empty((batch, n + 1), dtype=torch.int32)


def _chain_traced(draft, ids, target, acc, emi, generator, *random):
    seeds = _seed_as_tensors(*random, draft)
    return draft, ids, target, acc, emi, generator, *seeds, random[-1]


chain_speculative = _define(
    "chain_speculative",
    "(Tensor draft_probs, Tensor draft_ids, Tensor target_probs, Tensor(a!) accepted, "
    f"Tensor(b!) emitted, {_RANDOM}) -> Tensor",
    _chain_impl,
    _chain_fake,
    seeded=True,
    traced_args=_chain_traced,
)
