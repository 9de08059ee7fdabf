"""The low-level ops processors legalize into, and the fused ops the compiler builds.

Filters and samplers call the public functions of :mod:`aotinfer.sampling` (so CUDA tensors
run on the provider and CPU tensors on the reference path, with that module's validation);
``TemperatureOp``, ``SoftmaxOp`` and ``MinPOp`` are plain torch. Runtime parameters come
from the pipe's keyword arguments, falling back to the op's compile-time defaults. A tensor
parameter (one value per row) is passed to the sampling function unchanged; a scalar is
checked here first, with FlashInfer's messages.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, Optional, Union

import torch

from .. import sampling
from .._sampling_checks import TEMPERATURE_MAX, TEMPERATURE_MIN, per_row_param
from .._views import check_tensor
from .op import ParameterizedOp
from .types import TaggedTensor, TensorType

__all__ = [
    "FusedProbsMinPSampleOp",
    "FusedProbsTopKSampleOp",
    "FusedProbsTopKTopPSampleOp",
    "FusedProbsTopPSampleOp",
    "FusedTemperatureSoftmaxOp",
    "LogitsSampleOp",
    "LogitsTopKOp",
    "MinPOp",
    "ProbsSampleOp",
    "ProbsTopKOp",
    "SoftmaxOp",
    "TemperatureOp",
    "TopPOp",
]

# --- runtime parameter checks -----------------------------------------------------------


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _temperature(value: Any) -> Union[float, torch.Tensor]:
    """A tensor as is, or a positive Python float (an int such as ``1`` is refused, as in
    FlashInfer) in softmax's range [2**-126, 2**126], so that the unfused op refuses what
    the fused one refuses (inf: logits / inf turns a row's -inf entries into NaN; below
    2**-126 rows of inf and NaN)."""
    if isinstance(value, torch.Tensor):
        return value
    if not isinstance(value, float) or not 0 < value < float("inf"):
        raise ValueError(f"Temperature must be positive float or a tensor array, got {value!r}")
    if not TEMPERATURE_MIN <= value <= TEMPERATURE_MAX:
        raise ValueError(
            "temperature must be in [2**-126, 2**126] (positive, its reciprocal a normal "
            f"float32, as softmax requires), got {value!r}"
        )
    return value


def _top_k(value: Any) -> Union[int, torch.Tensor]:
    """A tensor as is, or a positive Python int."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"top_k must be a positive integer or a tensor array, got {value!r}")
    return value


def _unit_fraction(name: str, value: Any) -> Union[float, torch.Tensor]:
    """A tensor as is, or a real number in (0, 1] returned as float."""
    if isinstance(value, torch.Tensor):
        return value
    if not _is_real(value) or not 0 < value <= 1:
        raise ValueError(f"{name} must be float in (0, 1] or a tensor array, got {value!r}")
    return float(value)


def _matrix(tensor: TaggedTensor) -> torch.Tensor:
    """The data of a torch-only op's input, which must be ``(batch_size, vocab_size)`` as
    the sampling functions require theirs (a 1-D row would broadcast a per-row parameter
    into a square matrix)."""
    return check_tensor("the pipe's input", tensor.data, ndim=2)


def _row_column(name: str, value: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    """A per-row float parameter as a float32 ``(rows, 1)`` column, for the torch-only ops
    (``data`` already 2-D), checked exactly as the sampling functions check theirs."""
    return per_row_param(name, value, data.size(0), data.device, integer=False).unsqueeze(-1)


def _sampling_args(op: ParameterizedOp, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``indices``, ``generator``, ``seed`` and ``offset`` (runtime, optional) and
    ``deterministic`` (compile time), as keyword arguments of the sampling functions.

    ``seed``/``offset`` are an aotinfer addition (FlashInfer's ops take neither): given as
    int64 tensors they let a sampling pipe be captured in a CUDA graph, where a generator
    cannot be read. Absent, the sampling function's defaults apply.
    """
    args = {
        "indices": op._get_param("indices", kwargs, required=False),
        "deterministic": op.default_params.get("deterministic", True),
        "generator": op._get_param("generator", kwargs, required=False),
    }
    for name in ("seed", "offset"):
        value = op._get_param(name, kwargs, required=False)
        if value is not None:
            args[name] = value
    return args


# --- discrete ops ---------------------------------------------------------------------------


class TemperatureOp(ParameterizedOp):
    """Divides logits by the temperature (plain torch). LOGITS -> LOGITS.

    Parameters
    ----------
    temperature : float or torch.Tensor, runtime
        A positive Python ``float`` (an ``int`` such as ``1`` is refused, as in FlashInfer)
        or a ``(batch_size,)`` float tensor with one temperature per row.

    Notes
    -----
    The result is float32 (float64 logits stay float64), as the fused temperature-softmax
    computes: FlashInfer's op divides in the logits' dtype, where fp16 logits of 3 over a
    temperature of 1e-5 overflow to inf and a sampler then takes the first inf, not the
    largest logit. A per-row tensor divides each row by its own value (FlashInfer's op
    broadcasts it against the last dimension instead, which only works by accident; here
    it means one temperature per request, as in ``softmax``).
    """

    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        temperature = _temperature(self._get_param("temperature", kwargs))
        data = _matrix(tensor)
        if data.dtype != torch.float64:
            data = data.float()
        if isinstance(temperature, torch.Tensor):
            scaled = data / _row_column("temperature", temperature, data).to(data.dtype)
        else:
            scaled = data / temperature
        return TaggedTensor(scaled, out_type)


class SoftmaxOp(ParameterizedOp):
    """``torch.softmax`` over the vocabulary. LOGITS -> PROBS.

    Parameters
    ----------
    enable_pdl : bool, optional, compile time
        Kept for the fused op built from this one (:class:`FusedTemperatureSoftmaxOp`);
        ``torch.softmax`` does not use it.
    """

    IN = TensorType.LOGITS
    OUT = TensorType.PROBS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        return TaggedTensor(torch.softmax(_matrix(tensor), dim=-1), out_type)


class ProbsTopKOp(ParameterizedOp):
    """Keeps the ``top_k`` largest probabilities of each row and renormalises. PROBS -> PROBS.

    Parameters
    ----------
    top_k : int or torch.Tensor, runtime
        A positive int, or a ``(batch_size,)`` int tensor with one value per row.

    See Also
    --------
    aotinfer.sampling.top_k_renorm_probs
    """

    IN = TensorType.PROBS
    OUT = TensorType.PROBS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        top_k = _top_k(self._get_param("top_k", kwargs))
        return TaggedTensor(sampling.top_k_renorm_probs(tensor.data, top_k), out_type)


class LogitsTopKOp(ParameterizedOp):
    """Sets every logit outside each row's ``top_k`` largest to ``-inf``. LOGITS -> LOGITS.

    Parameters
    ----------
    top_k : int or torch.Tensor, runtime
        A positive int, or a ``(batch_size,)`` int tensor with one value per row.

    See Also
    --------
    aotinfer.sampling.top_k_mask_logits
    """

    IN = TensorType.LOGITS
    OUT = TensorType.LOGITS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        top_k = _top_k(self._get_param("top_k", kwargs))
        return TaggedTensor(sampling.top_k_mask_logits(tensor.data, top_k), out_type)


class TopPOp(ParameterizedOp):
    """Keeps each row's nucleus (smallest top set with mass >= ``top_p``), renormalised.
    PROBS -> PROBS.

    Parameters
    ----------
    top_p : float or torch.Tensor, runtime
        A number in (0, 1], or a ``(batch_size,)`` float tensor with one value per row.
    is_deterministic : bool, optional
        Passed to :func:`aotinfer.sampling.top_p_renorm_probs`; a runtime keyword argument
        or a compile-time default (``TopP(is_deterministic=True)``). Default False.

    See Also
    --------
    aotinfer.sampling.top_p_renorm_probs
    """

    IN = TensorType.PROBS
    OUT = TensorType.PROBS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        top_p = _unit_fraction("top_p", self._get_param("top_p", kwargs))
        is_deterministic = self._get_param("is_deterministic", kwargs, required=False)
        probs = sampling.top_p_renorm_probs(
            tensor.data, top_p, is_deterministic=bool(is_deterministic)
        )
        return TaggedTensor(probs, out_type)


class MinPOp(ParameterizedOp):
    """Keeps tokens with ``p >= min_p * max(p)`` in each row, renormalised (plain torch).
    PROBS -> PROBS.

    Parameters
    ----------
    min_p : float or torch.Tensor, runtime
        A number in (0, 1], or a ``(batch_size,)`` float tensor with one value per row.
    """

    IN = TensorType.PROBS
    OUT = TensorType.PROBS

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        min_p = _unit_fraction("min_p", self._get_param("min_p", kwargs))
        probs = _matrix(tensor)
        if isinstance(min_p, torch.Tensor):
            min_p = _row_column("min_p", min_p, probs)
        # The renorm kernels' contract: NaN, negative and infinite probabilities act as 0,
        # and a row left with nothing stays all zero (0 / 0 would make it NaN).
        probs = probs.nan_to_num(nan=0.0, posinf=0.0).clamp_min(0)
        kept = probs >= min_p * probs.amax(dim=-1, keepdim=True)
        filtered = probs.masked_fill(~kept, 0)
        total = filtered.sum(dim=-1, keepdim=True)
        return TaggedTensor(filtered / total.masked_fill(total == 0, 1), out_type)


class ProbsSampleOp(ParameterizedOp):
    """Draws one token per output row from (unnormalised) probabilities. PROBS -> INDICES.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    indices : torch.Tensor, optional, runtime
        Output ``i`` is drawn from row ``indices[i]``.
    generator : torch.Generator, optional, runtime
        Source of randomness; consumed exactly as by the direct call.
    seed, offset : int or torch.Tensor, optional, runtime
        Explicit random state instead of ``generator`` (both or neither), as in the
        sampling functions; tensors make the op capturable in a CUDA graph.

    See Also
    --------
    aotinfer.sampling.sampling_from_probs
    """

    IN = TensorType.PROBS
    OUT = TensorType.INDICES

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        samples = sampling.sampling_from_probs(tensor.data, **_sampling_args(self, kwargs))
        return TaggedTensor(samples, out_type)


class LogitsSampleOp(ParameterizedOp):
    """Draws one token per output row from ``softmax(logits)`` (Gumbel-max).
    LOGITS -> INDICES.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    indices : torch.Tensor, optional, runtime
        Output ``i`` is drawn from row ``indices[i]``.
    generator : torch.Generator, optional, runtime
        Source of randomness; consumed exactly as by the direct call.
    seed, offset : int or torch.Tensor, optional, runtime
        As for :class:`ProbsSampleOp`.

    See Also
    --------
    aotinfer.sampling.sampling_from_logits
    """

    IN = TensorType.LOGITS
    OUT = TensorType.INDICES

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        samples = sampling.sampling_from_logits(tensor.data, **_sampling_args(self, kwargs))
        return TaggedTensor(samples, out_type)


# --- fused ops ------------------------------------------------------------------------------


class FusedTemperatureSoftmaxOp(ParameterizedOp):
    """``softmax(logits / temperature)`` in one kernel. LOGITS -> PROBS.

    Built by the compiler from ``TemperatureOp, SoftmaxOp``.

    Parameters
    ----------
    enable_pdl : bool, optional, compile time
        Programmatic dependent launch; ``None`` lets :func:`aotinfer.softmax` decide.
    temperature : float or torch.Tensor, runtime
        As for :class:`TemperatureOp`.

    See Also
    --------
    aotinfer.sampling.softmax
    """

    IN = TensorType.LOGITS
    OUT = TensorType.PROBS

    def __init__(self, enable_pdl: Optional[bool] = None, **default_params: Any) -> None:
        super().__init__(enable_pdl=enable_pdl, **default_params)

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        temperature = _temperature(self._get_param("temperature", kwargs))
        probs = sampling.softmax(
            tensor.data,
            temperature=temperature,
            enable_pdl=self.default_params.get("enable_pdl"),
        )
        return TaggedTensor(probs, out_type)


class _FusedFilterSampleOp(ParameterizedOp):
    """Shared body of the fused filter-and-sample ops: read one filter parameter, check it,
    call one sampling function. Subclasses name the parameter and the function."""

    IN = TensorType.PROBS
    OUT = TensorType.INDICES
    _PARAM = ""  # runtime keyword argument
    _SAMPLER = ""  # name of the aotinfer.sampling function

    def __init__(self, deterministic: bool = True, **default_params: Any) -> None:
        super().__init__(deterministic=deterministic, **default_params)

    def _check(self, value: Any) -> Any:
        return _unit_fraction(self._PARAM, value)

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        value = self._check(self._get_param(self._PARAM, kwargs))
        sampler = getattr(sampling, self._SAMPLER)
        samples = sampler(tensor.data, value, **_sampling_args(self, kwargs))
        return TaggedTensor(samples, out_type)


class FusedProbsTopKSampleOp(_FusedFilterSampleOp):
    """Samples from each row's top-k set without renormalising first. PROBS -> INDICES.

    Built by the compiler from ``ProbsTopKOp, ProbsSampleOp``.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    top_k : int or torch.Tensor, runtime
        As for :class:`ProbsTopKOp`.
    indices, generator, seed, offset : optional, runtime
        As for :class:`ProbsSampleOp`.

    See Also
    --------
    aotinfer.sampling.top_k_sampling_from_probs
    """

    _PARAM = "top_k"
    _SAMPLER = "top_k_sampling_from_probs"

    def _check(self, value: Any) -> Any:
        return _top_k(value)


class FusedProbsTopPSampleOp(_FusedFilterSampleOp):
    """Samples from each row's nucleus without renormalising first. PROBS -> INDICES.

    Built by the compiler from ``TopPOp, ProbsSampleOp``.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    top_p : float or torch.Tensor, runtime
        As for :class:`TopPOp`.
    indices, generator, seed, offset : optional, runtime
        As for :class:`ProbsSampleOp`.

    See Also
    --------
    aotinfer.sampling.top_p_sampling_from_probs
    """

    _PARAM = "top_p"
    _SAMPLER = "top_p_sampling_from_probs"


class FusedProbsMinPSampleOp(_FusedFilterSampleOp):
    """Samples from the tokens with ``p >= min_p * max(p)`` of each row. PROBS -> INDICES.

    Built by the compiler from ``MinPOp, ProbsSampleOp``.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    min_p : float or torch.Tensor, runtime
        As for :class:`MinPOp`.
    indices, generator, seed, offset : optional, runtime
        As for :class:`ProbsSampleOp`.

    See Also
    --------
    aotinfer.sampling.min_p_sampling_from_probs
    """

    _PARAM = "min_p"
    _SAMPLER = "min_p_sampling_from_probs"


class FusedProbsTopKTopPSampleOp(ParameterizedOp):
    """Samples from the tokens that are both in the top-k set and in the nucleus of the
    original row (``filter_apply_order="joint"``). PROBS -> INDICES.

    Built by the compiler from ``ProbsTopKOp, TopPOp, ProbsSampleOp`` when the ``TopK``
    processor was created with ``joint_topk_topp=True``. Joint filtering differs from the
    unfused chain, which applies top-p to the renormalised top-k distribution.

    Parameters
    ----------
    deterministic : bool, optional, compile time
        Default True.
    top_k : int or torch.Tensor, runtime
    top_p : float or torch.Tensor, runtime
    indices, generator, seed, offset : optional, runtime
        As for :class:`ProbsSampleOp`.

    See Also
    --------
    aotinfer.sampling.top_k_top_p_sampling_from_probs
    """

    IN = TensorType.PROBS
    OUT = TensorType.INDICES

    def __init__(self, deterministic: bool = True, **default_params: Any) -> None:
        super().__init__(deterministic=deterministic, **default_params)

    def __call__(self, tensor: TaggedTensor, **kwargs: Any) -> TaggedTensor:
        out_type = self._validate_input_type(tensor)
        top_k = _top_k(self._get_param("top_k", kwargs))
        top_p = _unit_fraction("top_p", self._get_param("top_p", kwargs))
        samples = sampling.top_k_top_p_sampling_from_probs(
            tensor.data,
            top_k,
            top_p,
            filter_apply_order="joint",
            **_sampling_args(self, kwargs),
        )
        return TaggedTensor(samples, out_type)
