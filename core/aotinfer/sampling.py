"""Sampling kernels with FlashInfer's API (``flashinfer.sampling``).

CUDA tensors run on the provider chosen for their device; CPU tensors run on the pure-PyTorch
reference (``aotinfer.reference``), which draws exactly the tokens the kernels draw for the
same seed and offset. There is no fallback from CUDA to the reference path. Every argument
is validated here, before any launch, with a ValueError naming the argument, what was
expected and what was given. Every function is a torch custom op underneath
(``aotinfer._sampling_ops``), so ``torch.compile(fullgraph=True)`` can trace it.

No sorting of the vocabulary: samplers from probabilities draw by an inverse CDF over the
kept tokens in fixed point (integer masses, one 64-bit uniform per output row; exact for
``p`` renormalised over the kept set, and the same token whatever the summation order) or,
from logits, by Gumbel-max (``argmax x_i - log E_i``, ``E_i`` independent Exp(1));
top-k / top-p / min-p sets are defined by thresholds (see
``aotinfer.reference.sampling`` for the exact definitions the kernels implement).

NaN and infinity contract (no input crashes a kernel, reads out of bounds or affects
another row):

- NaN entries of ``probs`` act as probability 0 and are never drawn; negative and infinite
  entries act as 0 too (only finite positive probabilities take part).
- NaN logits act as ``-inf`` (never drawn). ``top_k_top_p_sampling_from_logits`` keeps that
  rule through its softmax (top-k masking and the joint path both turn NaN into -inf first).
- A row with no finite positive probability (all zero, all NaN; for logits: all -inf or
  NaN) gives sample 0 and ``valid = False`` (``return_valid=True``), never an error.
- ``check_nan=True`` raises ``ValueError("Input probs contains NaN.")`` (or ``"Input logits
  contains NaN."`` for the functions taking logits) when any entry is NaN. It synchronises
  the host, so it cannot be captured in a CUDA graph or traced by torch.compile.
- ``softmax``: a row holding a NaN, or only -inf, is all NaN (as ``torch.softmax``).

Per-row parameters (``top_k``, ``top_p``, ``min_p``) are a Python number or a 1-D tensor of
length ``probs.size(0)`` (the unique rows), indexed by source row: output row ``b`` uses
``param[indices[b]]``. FlashInfer checks that same length but indexes top_k and min_p by
output row; aotinfer indexes all of them by source row. Values inside a tensor are not
checked on the device; a per-row ``k < 1`` or ``k >= V`` means "no top-k filter".

Randomness (Philox4x32-10, ``aotinfer.reference.philox``): with ``seed`` and ``offset`` both
None, the call takes them from ``generator`` (default: the device's default generator) and
advances it, by FlashInfer's rules for CUDA generators (see ``get_seed_and_offset``).
Explicit ``seed`` and ``offset`` must come together: both ints, or both 1-D int64/uint64
tensors of length 1 or batch on the input's device (one per output row, honoured row by
row; length 1 broadcasts); they are used as given and never advanced. Tensors make CUDA
graph capture safe: rewrite them between replays. The same (seed, offset) gives the same
tokens. ``deterministic`` is accepted for compatibility and has no effect: every kernel
here is deterministic.

Outputs: samples are ``indices.dtype`` when ``indices`` is given, int32 otherwise.

Row length: any vocabulary size on the CPU; on CUDA, samplers and renormalisation take rows
of at most 2^31 - 1 elements (the kernels index a row in 32 bits; longer rows are a
ValueError before any launch).
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from . import _rng, _views
from . import _sampling_checks as _checks
from . import _sampling_ops as _ops
from .reference.sampling import FilterMode

__all__ = [
    "softmax",
    "sampling_from_logits",
    "sampling_from_probs",
    "top_p_sampling_from_probs",
    "top_k_sampling_from_probs",
    "min_p_sampling_from_probs",
    "top_k_top_p_sampling_from_probs",
    "top_k_top_p_sampling_from_logits",
    "top_p_renorm_probs",
    "top_p_renorm_prob",
    "top_k_renorm_probs",
    "top_k_renorm_prob",
    "top_k_mask_logits",
    "chain_speculative_sampling",
    "get_seed_and_offset",
]

SeedLike = Optional[Union[int, torch.Tensor]]
Samples = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]

get_seed_and_offset = _rng.get_seed_and_offset


# ----------------------------------------------------------------------------------------
# softmax


def _logits_matrix(name: str, logits) -> torch.Tensor:
    _views.check_tensor(name, logits, ndim=2)
    _views.check_device_supported(name, logits)
    if logits.shape[0] > _checks.INT32_MAX:  # the kernels launch a block (or cluster) per row
        raise ValueError(f"{name} has {logits.shape[0]} rows; at most 2**31 - 1 are served")
    if not logits.is_floating_point() or logits.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError(
            f"{name} must be a floating-point tensor (float32, float16 or bfloat16), got "
            f"{str(logits.dtype).replace('torch.', '')}"
        )
    if logits.dtype not in _views.FLOAT_DTYPES:
        logits = logits.float()  # float64 and others: computed in float32, as FlashInfer does
    if logits.stride(-1) != 1 and logits.size(-1) > 1:
        logits = logits.contiguous()
    return logits


def _temperature(temperature, logits: torch.Tensor) -> Tuple[float, Optional[torch.Tensor]]:
    """(scalar, per-row tensor or None) for the kernel."""
    if temperature is None:
        return 1.0, None
    if isinstance(temperature, torch.Tensor):
        if temperature.dim() == 0:
            raise ValueError(
                "temperature must be a float or a 1-D tensor of shape (batch_size,), got a 0-D "
                "tensor; pass float(temperature) for one value"
            )
        if not temperature.is_floating_point():
            raise ValueError(
                f"temperature tensor must be floating point, got "
                f"{str(temperature.dtype).replace('torch.', '')}"
            )
        return 1.0, _views.per_row_tensor(
            "temperature", temperature, logits.size(0), logits.device, torch.float32
        )
    return _checks.temperature_arg(temperature), None


def softmax(
    logits: torch.Tensor,
    temperature: Optional[Union[torch.Tensor, float]] = None,
    enable_pdl: Optional[bool] = None,
) -> torch.Tensor:
    """Softmax of ``logits / temperature`` over the vocabulary, one row per request.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch_size, vocab_size)``, float32, float16 or bfloat16 (other float dtypes are
        cast to float32). Any vocabulary size; the last dimension need not be a multiple of
        anything.
    temperature : float or torch.Tensor, optional
        ``None`` (1.0), a float in ``[2**-126, 2**126]`` for every row (its reciprocal, by
        which the kernels scale, a normal float32), or a ``(batch_size,)`` float tensor
        with one temperature per row (values are not checked on the device; a zero,
        negative or out-of-range temperature gives inf/NaN rows). As in
        ``torch.softmax(logits / temperature)``, a row whose scaled logits overflow float32
        comes out NaN.
    enable_pdl : bool, optional
        Programmatic dependent launch (lets the kernel start while the previous one in the
        stream finishes). ``None``: on for compute capability 9.0 and newer.

    Returns
    -------
    torch.Tensor
        ``(batch_size, vocab_size)`` float32 probabilities. ``-inf`` logits get probability
        0; a row holding any NaN, or only ``-inf``, is all NaN (as ``torch.softmax``).

    Examples
    --------
    >>> logits = torch.randn(4, 32000, dtype=torch.bfloat16, device="cuda")
    >>> probs = aotinfer.softmax(logits, temperature=0.7)
    """
    logits = _logits_matrix("logits", logits)
    scalar, per_row = _temperature(temperature, logits)
    pdl = None if enable_pdl is None else _views.flag("enable_pdl", enable_pdl)
    return _ops.softmax(logits, per_row, scalar, pdl)


# ----------------------------------------------------------------------------------------
# Samplers

_NO_TOP_K: Tuple[Optional[torch.Tensor], int] = (None, 0)
_NO_TOP_P: Tuple[Optional[torch.Tensor], float] = (None, 1.0)
_NO_MIN_P: Tuple[Optional[torch.Tensor], float] = (None, 0.0)


class _Call:
    """The validated parts every sampler shares: input, indices, batch, randomness."""

    def __init__(self, input: torch.Tensor, indices, generator, seed, offset, check_nan: bool):
        # The defaults (None) skip their checks' calls: this runs on every eager call.
        self.input = input
        self.rows = input.size(0)
        self.batch = self.rows
        self.indices = None
        if indices is not None:
            self.indices = _checks.indices_arg(indices, self.rows, input.device)
            self.batch = self.indices.size(0)
        self.random = _checks.USE_GENERATOR
        if seed is not None or offset is not None:
            self.random = _checks.random_args(seed, offset, input.device, self.batch)
        self.generator = None
        if generator is not None:
            self.generator = _checks.generator_arg(generator, input.device)
        self.check_nan = _views.flag("check_nan", check_nan)

    def nan_check(self, kind: str) -> None:
        """Runs last, after every other check: it is the one that syncs the host."""
        if self.check_nan:
            _checks.check_nan(kind, self.input)

    def sample(
        self,
        filter_mode: int,
        return_valid: bool = False,
        is_logits: bool = False,
        top_k=_NO_TOP_K,
        top_p=_NO_TOP_P,
        min_p=_NO_MIN_P,
        input: Optional[torch.Tensor] = None,
    ) -> Samples:
        """The samples, or ``(samples, valid)`` with ``return_valid`` (eager calls allocate
        ``valid`` only then)."""
        return_valid = _views.flag("return_valid", return_valid)
        r = self.random
        samples_valid = _ops.sample(
            self.input if input is None else input,
            is_logits,
            self.indices,
            int(filter_mode),
            top_k[0],
            top_k[1],
            top_p[0],
            top_p[1],
            min_p[0],
            min_p[1],
            self.generator,
            r.seed_arr,
            r.seed,
            r.offset_arr,
            r.offset,
            r.use_generator,
            want_valid=return_valid,
        )
        return samples_valid if return_valid else samples_valid[0]


_COMMON_DOC = """    indices : torch.Tensor, optional
        ``(batch_size,)`` int32 or int64: output ``b`` is drawn from row ``indices[b]``
        (many outputs may share a row; each draws independently). ``None``: one output per
        row. An index outside ``[0, num_rows)`` gives sample 0 and ``valid = False`` (it is
        not checked up front: that would synchronise the host).
    deterministic : bool
        Accepted for FlashInfer compatibility; no effect (always deterministic).
    generator : torch.Generator, optional
        Source of seed and offset when both are None (default: the device's default
        generator), advanced by the call; see ``get_seed_and_offset``.
    check_nan : bool
        Raise ``ValueError`` if the input holds a NaN (synchronises the host).
    seed, offset : int or torch.Tensor, optional
        Explicit random state, both or neither: ints, or 1-D int64/uint64 tensors of
        length 1 or ``batch_size`` on the input's device (per output row).
"""

_RETURNS_DOC = """
    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``samples`` ``(batch_size,)`` token ids, ``indices.dtype`` or int32; with
        ``return_valid=True`` also ``valid`` ``(batch_size,)`` bool, False for a row with
        nothing to draw (its sample is 0).
"""


def _doc(fn):
    """Fills the shared parameter and return sections into ``fn``'s docstring."""
    if fn.__doc__:  # None under python -OO
        fn.__doc__ = fn.__doc__.replace("    {common}\n", _COMMON_DOC).replace(
            "    {returns}\n", _RETURNS_DOC
        )
    return fn


def _probs_call(probs, indices, generator, check_nan, seed, offset) -> _Call:
    return _Call(_checks.matrix("probs", probs), indices, generator, seed, offset, check_nan)


def _logits_input(logits) -> torch.Tensor:
    """Logits as the mask and softmax kernels read them: float32/float16/bfloat16 kept,
    other float dtypes cast to float32, non-empty vocabulary."""
    logits = _logits_matrix("logits", logits)
    if logits.size(1) == 0:
        raise ValueError(
            f"logits must have a non-empty last (vocabulary) dimension, got shape "
            f"{tuple(logits.shape)}"
        )
    return logits


@_doc
def sampling_from_logits(
    logits: torch.Tensor,
    indices: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
) -> torch.Tensor:
    """Samples one token per output row from ``softmax(logits)``, by Gumbel-max (the
    probabilities are never materialised).

    Parameters
    ----------
    logits : torch.Tensor
        ``(num_rows, vocab_size)``, any float dtype (read as float32). NaN logits act as
        -inf; a row of only -inf/NaN gives token 0.
    {common}

    Returns
    -------
    torch.Tensor
        ``(batch_size,)`` token ids, ``indices.dtype`` or int32.
    """
    call = _Call(_checks.matrix("logits", logits), indices, generator, seed, offset, check_nan)
    call.nan_check("logits")
    return call.sample(FilterMode.NONE, is_logits=True)


@_doc
def sampling_from_probs(
    probs: torch.Tensor,
    indices: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
    return_valid: bool = False,
) -> Samples:
    """Samples one token per output row from ``probs`` (renormalised implicitly: rows need
    not sum to 1).

    Parameters
    ----------
    probs : torch.Tensor
        ``(num_rows, vocab_size)``, float32 expected (other float dtypes are cast).
    {common}
    return_valid : bool
        Also return the ``valid`` mask.
    {returns}
    """
    call = _probs_call(probs, indices, generator, check_nan, seed, offset)
    call.nan_check("probs")
    return call.sample(FilterMode.NONE, return_valid)


@_doc
def top_p_sampling_from_probs(
    probs: torch.Tensor,
    top_p: Union[torch.Tensor, float],
    indices: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
    return_valid: bool = False,
) -> Samples:
    """Top-p (nucleus) sampling: draws from the smallest set of most probable tokens whose
    mass reaches ``top_p`` of the row's mass (ties at the threshold are all kept).

    Draws by rejection (FlashInfer's scheme, in fixed point) at every shape; with
    AOTINFER_SAMPLING_TOP_P=threshold by the inverse CDF over the kept set instead: the same
    distribution, but not the same token for a seed (``reference.sampling.top_p_rejection``;
    README, "Top-p by rejection"). Before session 41, batches above 64 output rows of rows
    of at least 65536 drew by the inverse CDF.

    Parameters
    ----------
    probs : torch.Tensor
        ``(num_rows, vocab_size)``, float32 expected (other float dtypes are cast).
    top_p : float or torch.Tensor
        In (0, 1], or a ``(num_rows,)`` float tensor (per source row).
    {common}
    return_valid : bool
        Also return the ``valid`` mask.
    {returns}
    """
    call = _probs_call(probs, indices, generator, check_nan, seed, offset)
    p = _checks.unit_interval_arg("top_p", top_p, call.rows, probs.device)
    call.nan_check("probs")
    return call.sample(FilterMode.TOP_P, return_valid, top_p=p)


@_doc
def top_k_sampling_from_probs(
    probs: torch.Tensor,
    top_k: Union[torch.Tensor, int],
    indices: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
    return_valid: bool = False,
) -> Samples:
    """Top-k sampling: draws from the tokens whose probability is at least the k-th
    largest (ties at the k-th value are all kept).

    Parameters
    ----------
    probs : torch.Tensor
        ``(num_rows, vocab_size)``, float32 expected (other float dtypes are cast).
    top_k : int or torch.Tensor
        ``>= 1`` (``>= vocab_size`` keeps everything), or a ``(num_rows,)`` integer tensor
        (per source row; ``k < 1`` or ``k >= vocab_size`` there means no filter).
    {common}
    return_valid : bool
        Also return the ``valid`` mask.
    {returns}
    """
    call = _probs_call(probs, indices, generator, check_nan, seed, offset)
    k = _checks.top_k_arg(top_k, call.rows, probs.device)
    call.nan_check("probs")
    return call.sample(FilterMode.TOP_K, return_valid, top_k=k)


@_doc
def min_p_sampling_from_probs(
    probs: torch.Tensor,
    min_p: Union[torch.Tensor, float],
    indices: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
    return_valid: bool = False,
) -> Samples:
    """Min-p sampling: draws from the tokens with ``p >= min_p * max(p)``.

    Parameters
    ----------
    probs : torch.Tensor
        ``(num_rows, vocab_size)``, float32 expected (other float dtypes are cast).
    min_p : float or torch.Tensor
        In (0, 1], or a ``(num_rows,)`` float tensor (per source row).
    {common}
    return_valid : bool
        Also return the ``valid`` mask.
    {returns}
    """
    call = _probs_call(probs, indices, generator, check_nan, seed, offset)
    m = _checks.unit_interval_arg("min_p", min_p, call.rows, probs.device)
    call.nan_check("probs")
    return call.sample(FilterMode.MIN_P, return_valid, min_p=m)


@_doc
def top_k_top_p_sampling_from_probs(
    probs: torch.Tensor,
    top_k: Union[torch.Tensor, int],
    top_p: Union[torch.Tensor, float],
    indices: Optional[torch.Tensor] = None,
    filter_apply_order: str = "top_k_first",
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
    return_valid: bool = False,
) -> Samples:
    """Top-k and top-p sampling in one kernel.

    ``filter_apply_order="top_k_first"``: top-p is measured on the top-k set renormalised
    (what ``top_k_renorm_probs`` then ``top_p_sampling_from_probs`` would do).
    ``"joint"``: both thresholds are measured on the original distribution and the kept set
    is their intersection.

    Parameters
    ----------
    probs : torch.Tensor
        ``(num_rows, vocab_size)``, float32 expected (other float dtypes are cast).
    top_k : int or torch.Tensor
        As in ``top_k_sampling_from_probs``.
    top_p : float or torch.Tensor
        As in ``top_p_sampling_from_probs``.
    filter_apply_order : str
        ``"top_k_first"`` or ``"joint"``.
    {common}
    return_valid : bool
        Also return the ``valid`` mask.
    {returns}
    """
    call = _probs_call(probs, indices, generator, check_nan, seed, offset)
    k = _checks.top_k_arg(top_k, call.rows, probs.device)
    p = _checks.unit_interval_arg("top_p", top_p, call.rows, probs.device)
    order = _checks.filter_order_arg(filter_apply_order)
    mode = FilterMode.TOP_K_THEN_TOP_P if order == "top_k_first" else FilterMode.JOINT
    call.nan_check("probs")
    return call.sample(mode, return_valid, top_k=k, top_p=p)


@_doc
def top_k_top_p_sampling_from_logits(
    logits: torch.Tensor,
    top_k: Union[torch.Tensor, int],
    top_p: Union[torch.Tensor, float],
    indices: Optional[torch.Tensor] = None,
    filter_apply_order: str = "top_k_first",
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    check_nan: bool = False,
    seed: SeedLike = None,
    offset: SeedLike = None,
) -> torch.Tensor:
    """Top-k and top-p sampling from logits.

    ``"top_k_first"``: ``top_k_mask_logits`` -> softmax -> ``top_p_sampling_from_probs``.
    ``"joint"``: NaN logits -> -inf, softmax, then the joint filter of
    ``top_k_top_p_sampling_from_probs``. Either way NaN logits act as -inf; a row with no
    finite logit (after masking) gives token 0. The generator advances as for top-p
    sampling (``batch * 32``).

    Parameters
    ----------
    logits : torch.Tensor
        ``(num_rows, vocab_size)``, float32, float16 or bfloat16 (other floats are cast).
    top_k : int or torch.Tensor
        As in ``top_k_sampling_from_probs``.
    top_p : float or torch.Tensor
        As in ``top_p_sampling_from_probs``.
    filter_apply_order : str
        ``"top_k_first"`` or ``"joint"``.
    {common}

    Returns
    -------
    torch.Tensor
        ``(batch_size,)`` token ids, ``indices.dtype`` or int32 (no ``return_valid``, as in
        FlashInfer).
    """
    call = _Call(_logits_input(logits), indices, generator, seed, offset, check_nan)
    logits = call.input
    k = _checks.top_k_arg(top_k, call.rows, logits.device)
    p = _checks.unit_interval_arg("top_p", top_p, call.rows, logits.device)
    order = _checks.filter_order_arg(filter_apply_order)
    call.nan_check("logits")
    if order == "top_k_first":
        probs = _ops.softmax(_ops.top_k_mask(logits, k[0], k[1]), None, 1.0, None)
        return call.sample(FilterMode.TOP_P, top_p=p, input=probs)
    finite = torch.nan_to_num(logits, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    probs = _ops.softmax(finite, None, 1.0, None)
    return call.sample(FilterMode.JOINT, top_k=k, top_p=p, input=probs)


# ----------------------------------------------------------------------------------------
# Renormalisation and masking


def top_p_renorm_probs(
    probs: torch.Tensor,
    top_p: Union[torch.Tensor, float],
    is_deterministic: bool = False,
) -> torch.Tensor:
    """Keeps the top-p set of each row and renormalises it to sum to 1.

    Parameters
    ----------
    probs : torch.Tensor
        ``(batch_size, vocab_size)``, any float dtype (read as float32).
    top_p : float or torch.Tensor
        In (0, 1], or a ``(batch_size,)`` float tensor.
    is_deterministic : bool
        Accepted for FlashInfer compatibility; the result is always deterministic.

    Returns
    -------
    torch.Tensor
        ``(batch_size, vocab_size)`` float32: ``p / mass(kept)`` on the kept set, 0
        elsewhere (NaN, negative and infinite entries are 0). A row with no finite
        positive entry is all 0.
    """
    probs = _checks.matrix("probs", probs)
    p = _checks.unit_interval_arg("top_p", top_p, probs.size(0), probs.device)
    return _ops.renorm(probs, int(FilterMode.TOP_P), None, 0, p[0], p[1])


def top_k_renorm_probs(probs: torch.Tensor, top_k: Union[torch.Tensor, int]) -> torch.Tensor:
    """Keeps the top-k set of each row (ties at the k-th value kept) and renormalises it.

    Parameters
    ----------
    probs : torch.Tensor
        ``(batch_size, vocab_size)``, float32, float16 or bfloat16.
    top_k : int or torch.Tensor
        ``>= 1``, or a ``(batch_size,)`` integer tensor (``k < 1`` or ``k >= vocab_size``
        there keeps every positive entry).

    Returns
    -------
    torch.Tensor
        ``(batch_size, vocab_size)``, the dtype of ``probs``: ``p / mass(kept)`` on the kept
        set, 0 elsewhere; a row with no finite positive entry is all 0.
    """
    probs = _checks.matrix("probs", probs, float32=False)
    k = _checks.top_k_arg(top_k, probs.size(0), probs.device)
    return _ops.renorm(probs, int(FilterMode.TOP_K), k[0], k[1], None, 1.0)


def top_k_mask_logits(logits: torch.Tensor, top_k: Union[torch.Tensor, int]) -> torch.Tensor:
    """Sets every logit outside the top-k set of its row to -inf.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch_size, vocab_size)``, float32, float16 or bfloat16.
    top_k : int or torch.Tensor
        ``>= 1``, or a ``(batch_size,)`` integer tensor (``k < 1`` or ``k >= vocab_size``
        there keeps everything).

    Returns
    -------
    torch.Tensor
        ``(batch_size, vocab_size)``, the dtype of ``logits``: entries ``>=`` the k-th
        largest non-NaN value kept (ties kept), the rest -inf. NaN is never kept (it
        becomes -inf even without a filter). ``softmax`` of the result equals
        ``top_k_renorm_probs(softmax(logits))``.
    """
    logits = _checks.matrix("logits", logits, float32=False)
    k = _checks.top_k_arg(top_k, logits.size(0), logits.device)
    return _ops.top_k_mask(logits, k[0], k[1])


top_p_renorm_prob = top_p_renorm_probs
top_k_renorm_prob = top_k_renorm_probs


# ----------------------------------------------------------------------------------------
# Speculative decoding


def _count_tensor(name: str, value, batch: int, device: torch.device) -> torch.Tensor:
    if value is None:
        return torch.zeros(batch, dtype=torch.int32, device=device)
    _views.check_tensor(name, value, ndim=1, dtypes=(torch.int32,), device=device)
    if value.size(0) != batch:
        raise ValueError(f"{name} must have shape ({batch},), got {tuple(value.shape)}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous (it is added to in place)")
    return value


def chain_speculative_sampling(
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_probs: torch.Tensor,
    maybe_output_accepted_token_num: Optional[torch.Tensor] = None,
    maybe_output_emitted_draft_token_num: Optional[torch.Tensor] = None,
    deterministic: bool = True,
    generator: Optional[torch.Generator] = None,
    seed: SeedLike = None,
    offset: SeedLike = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Speculative sampling along a chain of ``n`` draft tokens per request.

    Position ``j`` accepts draft token ``t`` when ``u * draft_probs[b, j, t] <
    target_probs[b, j, t]`` (``u`` uniform); at the first rejection the token is drawn from
    ``relu(target - draft)`` renormalised (from the target itself if that is all zero), and
    when all ``n`` pass a bonus token is drawn from ``target_probs[b, n]``. A draft id
    outside ``[0, vocab_size)`` is rejected. Exact streams: see
    ``aotinfer.reference.sampling.chain_speculative_sampling``.

    Parameters
    ----------
    draft_probs : torch.Tensor
        ``(batch_size, n, vocab_size)`` float (read as float32).
    draft_token_ids : torch.Tensor
        ``(batch_size, n)`` int32 or int64.
    target_probs : torch.Tensor
        ``(batch_size, n + 1, vocab_size)`` float (read as float32).
    maybe_output_accepted_token_num, maybe_output_emitted_draft_token_num : torch.Tensor, optional
        ``(batch_size,)`` int32 counters that the call adds to in place (zeros when None).
    deterministic : bool
        Accepted for compatibility; no effect.
    generator, seed, offset
        As for the samplers (the generator advances by ``batch_size * (n + 1)``).

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor)
        ``output_token_ids`` ``(batch_size, n + 1)`` int32 (accepted drafts, then the drawn
        token, then -1); ``accepted`` ``(batch_size,)`` int32, the positions that pass on
        their own, added over calls; ``emitted`` ``(batch_size,)`` int32, the drafts before
        the first rejection, added over calls (``emitted + 1`` ids are not -1).
    """
    draft = _checks.matrix("draft_probs", draft_probs, ndim=3).contiguous()
    batch, n, vocab = draft.shape
    device = draft.device
    target = _checks.matrix("target_probs", target_probs, ndim=3).contiguous()
    if tuple(target.shape) != (batch, n + 1, vocab):
        raise ValueError(
            f"target_probs must have shape (batch_size, n + 1, vocab_size) = "
            f"{(batch, n + 1, vocab)} to match draft_probs {tuple(draft.shape)}, got "
            f"{tuple(target.shape)}"
        )
    if target.device != device:
        raise ValueError(f"target_probs must be on {device}, like draft_probs, got {target.device}")
    _views.check_tensor(
        "draft_token_ids", draft_token_ids, ndim=2, dtypes=(torch.int32, torch.int64)
    )
    if tuple(draft_token_ids.shape) != (batch, n):
        raise ValueError(
            f"draft_token_ids must have shape (batch_size, n) = {(batch, n)}, got "
            f"{tuple(draft_token_ids.shape)}"
        )
    if draft_token_ids.device != device:
        raise ValueError(
            f"draft_token_ids must be on {device}, like draft_probs, got {draft_token_ids.device}"
        )
    ids = draft_token_ids.contiguous()
    accepted = _count_tensor(
        "maybe_output_accepted_token_num", maybe_output_accepted_token_num, batch, device
    )
    emitted = _count_tensor(
        "maybe_output_emitted_draft_token_num", maybe_output_emitted_draft_token_num, batch, device
    )
    rnd = _checks.random_args(seed, offset, device, batch)
    gen = _checks.generator_arg(generator, device)
    out = _ops.chain_speculative(
        draft, ids, target, accepted, emitted, gen,
        rnd.seed_arr, rnd.seed, rnd.offset_arr, rnd.offset, rnd.use_generator,
    )  # fmt: skip
    return out, accepted, emitted
