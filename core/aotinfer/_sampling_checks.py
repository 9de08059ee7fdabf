"""Argument validation for the sampling family, run in the core before any launch.

Every failure is a ValueError that names the argument, says what was expected and what
was given. Where FlashInfer has a message for the same condition (API.md section 1.3) its
text is kept, prefixed by the argument's name, so code that matches FlashInfer's messages
keeps working.

Per-row parameters (top_k, top_p, min_p) are a Python number for every row or a 1-D
tensor with one value per row of ``probs`` (``probs.size(0)``, the unique rows), indexed
by source row: output row ``b`` uses ``param[indices[b]]``. FlashInfer checks the same
length but indexes top_k and min_p by output row (API.md 1.3, Quirk); aotinfer indexes all
three by source row, which is what the length check implies. Values inside a tensor are
not checked on the device: a per-row k < 1 or k >= V means "no top-k filter".
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from . import _views
from .reference.philox import to_int64

INT32_MAX = 2**31 - 1
_UINT64 = getattr(torch, "uint64", None)
# Integer dtypes whose values may not fit int32 (per_row_param saturates them).
_WIDE_INTS = tuple(d for d in (torch.int64, getattr(torch, "uint32", None), _UINT64) if d)
FILTER_ORDERS = ("top_k_first", "joint")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {_dtype_name(value.dtype)} tensor"
    return f"{value!r} ({type(value).__name__})"


class UnsupportedDtypeError(ValueError, AssertionError):
    """FlashInfer's top_k_renorm_probs / top_k_mask_logits assert their dtype
    (AssertionError, API.md 1.3); here a ValueError as every argument error is, that
    ``except AssertionError`` written for FlashInfer still catches."""


def matrix(name: str, value, *, ndim: int = 2, float32: bool = True) -> torch.Tensor:
    """A floating-point ``ndim``-D input on CPU or CUDA with a non-empty last dimension.

    ``float32``: cast to float32 (what the sampling kernels read); otherwise float32,
    float16 and bfloat16 are kept and anything else is refused. The last dimension is
    made contiguous; rows may be strided.
    """
    _views.check_tensor(name, value, ndim=ndim)
    _views.check_device_supported(name, value)
    shape = value.shape  # (one accessor call: each size(i) costs ~0.17 us on the CI CPU)
    if shape[0] > INT32_MAX:  # the kernels launch a block (or a cluster) per row
        raise ValueError(f"{name} has {shape[0]} rows; at most 2**31 - 1 are served")
    if float32:
        if not value.is_floating_point():
            raise ValueError(
                f"{name} must be a floating-point tensor (float32 expected), got "
                f"{_dtype_name(value.dtype)}"
            )
        if value.dtype != torch.float32:
            value = value.to(torch.float32)
    elif value.dtype not in _views.FLOAT_DTYPES:
        raise UnsupportedDtypeError(
            f"{name}: Unsupported dtype {_dtype_name(value.dtype)}, expected float32, "
            f"float16, or bfloat16"
        )
    if shape[-1] == 0:
        raise ValueError(
            f"{name} must have a non-empty last (vocabulary) dimension, got shape {tuple(shape)}"
        )
    if shape[-1] > 1 and value.stride(-1) != 1:
        value = value.contiguous()
    return value


def indices_arg(indices, rows: int, device: torch.device) -> Optional[torch.Tensor]:
    """``indices``: None or a 1-D int32/int64 tensor on the input's device."""
    if indices is None:
        return None
    _views.check_tensor("indices", indices, ndim=1, dtypes=(torch.int32, torch.int64))
    if indices.numel() > INT32_MAX:  # one output row, so one block, per entry
        raise ValueError(f"indices has {indices.numel()} entries; at most 2**31 - 1 are served")
    if indices.device != device:
        raise ValueError(f"indices must be on {device}, like the input, got {indices.device}")
    if rows == 0 and indices.numel() > 0:
        raise ValueError(f"indices has {indices.numel()} entries but the input has no rows")
    return indices.contiguous()


def per_row_param(
    name: str, value: torch.Tensor, rows: int, device: torch.device, integer: bool
) -> torch.Tensor:
    """A per-row sampling parameter (``top_k``, ``top_p``, ``min_p``, the LogitsPipe's
    ``temperature``): 1-D of length ``rows`` on ``device``, with FlashInfer's texts; returned
    contiguous as int32 (``integer``) or float32."""
    _views.check_dense(name, value)
    if value.dim() == 0:
        raise ValueError(
            f"{name}: Expected a 1D tensor of shape (batch_size,) or scalar for the sampling "
            f"parameter, but got a 0-dimensional tensor."
        )
    if value.dim() != 1:
        raise ValueError(
            f"{name}: Expected a 1D tensor or scalar for the sampling parameter, but got a "
            f"{value.dim()}D tensor."
        )
    if value.size(0) != rows:
        raise ValueError(
            f"{name}: Sampling parameter tensor batch size mismatch: expected length {rows} "
            f"to match the reference tensor batch size, but got length {value.size(0)}."
        )
    if value.device != device:
        raise ValueError(f"{name} must be on {device}, like the input, got {value.device}")
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise ValueError(
            f"{name} tensor must have an integer dtype (int32 or int64), got "
            f"{_dtype_name(value.dtype)}"
        )
    if not integer and not value.is_floating_point():
        raise ValueError(
            f"{name} tensor must have a floating-point dtype (float32), got "
            f"{_dtype_name(value.dtype)}"
        )
    if integer and value.dtype in _WIDE_INTS:
        # Saturate, never wrap: k < 1 and k >= V both mean no filter, so 0 and INT32_MAX
        # stand for every value beyond them (a wrapping cast turned 2**32 + 1 into top-1).
        # One more small kernel, for int64 / uint32 / uint64 tensors only.
        wide = value.view(torch.int64) if value.dtype == _UINT64 else value.to(torch.int64)
        return wide.clamp(0, INT32_MAX).to(torch.int32)
    return value.to(torch.int32 if integer else torch.float32).contiguous()


def top_k_arg(value, rows: int, device: torch.device) -> Tuple[Optional[torch.Tensor], int]:
    """``top_k``: an int >= 1 (>= V means no filter) or a per-row integer tensor.
    Returns (int32 tensor or None, scalar clamped to int32)."""
    if type(value) is int and value >= 1:  # the common case, without the ABC checks below
        return None, min(value, INT32_MAX)
    if isinstance(value, torch.Tensor):
        return per_row_param("top_k", value, rows, device, integer=True), 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"top_k must be an int >= 1 or a 1-D integer tensor, got {_kind(value)}")
    k = operator.index(value)
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    return None, min(k, INT32_MAX)


def unit_interval_arg(
    name: str, value, rows: int, device: torch.device
) -> Tuple[Optional[torch.Tensor], float]:
    """``top_p`` / ``min_p``: a number in (0, 1] or a per-row float tensor.
    Returns (float32 tensor or None, scalar)."""
    if type(value) is float and 0.0 < value <= 1.0:  # the common case, without ABC checks
        return None, value
    if isinstance(value, torch.Tensor):
        return per_row_param(name, value, rows, device, integer=False), 1.0
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{name} must be a float in (0, 1] or a 1-D float tensor, got {_kind(value)}"
        )
    v = float(value)
    if not 0.0 < v <= 1.0:  # also refuses NaN
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return None, v


def filter_order_arg(value) -> str:
    # (isinstance first: `in` compares with ==, which a NumPy array answers elementwise)
    if not isinstance(value, str) or value not in FILTER_ORDERS:
        raise ValueError(
            f"Invalid filter_apply_order: {value}; expected one of "
            f"{', '.join(repr(o) for o in FILTER_ORDERS)}"
        )
    return value


# The scalar temperatures whose reciprocal is a normal float32: the softmax kernels scale
# logits by 1 / temperature, which is inf below 2**-128 (0 * inf = NaN at the row's
# maximum) and subnormal above 2**126 (flushed to 0 where denormals are, -inf * 0 = NaN).
TEMPERATURE_MIN, TEMPERATURE_MAX = 2.0**-126, 2.0**126


def temperature_arg(value) -> float:
    """softmax's scalar ``temperature``: a real number (numpy scalars too, not bool) in
    ``[2**-126, 2**126]``, returned as float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"temperature must be a positive float or a 1-D float tensor, got {_kind(value)}"
        )
    t = float(value)
    if not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX:  # also refuses NaN
        raise ValueError(
            "temperature must be in [2**-126, 2**126] (positive, its reciprocal a normal "
            f"float32: the kernels scale by 1 / temperature), got {value!r}"
        )
    return t


def generator_arg(generator, device: torch.device) -> Optional[torch.Generator]:
    """``generator``: None or a torch.Generator of the input's device type (and index)."""
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {_kind(generator)}")
    gdev = generator.device
    same = gdev.type == device.type and (
        device.type == "cpu" or gdev.index is None or gdev.index == device.index
    )
    if not same:
        raise ValueError(
            f"generator must be a generator of {device}, like the input, got one of {gdev}"
        )
    return generator


def check_nan(kind: str, value: torch.Tensor) -> None:
    """check_nan=True: raise if any NaN (synchronises the host; not capturable)."""
    if bool(torch.isnan(value).any()):
        raise ValueError(f"Input {kind} contains NaN.")


@dataclass(frozen=True)
class RandomArgs:
    """Where a call's random numbers come from: tensors (per row or broadcast), two ints,
    or the generator (``use_generator``). Ints are the signed int64 view of the unsigned
    64-bit value; tensors are int64 (uint64 tensors are viewed as int64, same bits)."""

    use_generator: bool
    seed_arr: Optional[torch.Tensor] = None
    seed: int = 0
    offset_arr: Optional[torch.Tensor] = None
    offset: int = 0


USE_GENERATOR = RandomArgs(use_generator=True)  # frozen: one instance serves every call


def _seed_tensor(name: str, t: torch.Tensor, device: torch.device, batch: int) -> torch.Tensor:
    _views.check_dense(name, t)
    # FlashInfer's texts, then what was given.
    if t.device != device:
        raise ValueError(f"{name} tensor must be on {device}, got {t.device}")
    if t.dtype not in (torch.int64, _UINT64):
        raise ValueError(f"{name} tensor must be int64/uint64, got {_dtype_name(t.dtype)}")
    if t.dim() != 1:
        raise ValueError(f"{name} tensor must be 1D, got {t.dim()}-D of shape {tuple(t.shape)}")
    if t.size(0) not in (1, batch):
        raise ValueError(f"{name} tensor length must be 1 or {batch}, got {t.size(0)}")
    t = t.contiguous()
    return t if t.dtype == torch.int64 else t.view(torch.int64)


def random_args(seed, offset, device: torch.device, batch: int) -> RandomArgs:
    """Validates ``seed`` / ``offset``: both None (use the generator), both ints (any
    value, taken mod 2^64), or both 1-D int64/uint64 tensors of length 1 or ``batch`` on
    the input's device. Explicit values are used as given and never advanced."""
    if seed is None and offset is None:
        return USE_GENERATOR
    if type(seed) is int and type(offset) is int:  # the common explicit case, no ABC checks
        return RandomArgs(use_generator=False, seed=to_int64(seed), offset=to_int64(offset))
    if seed is None or offset is None:
        given = "seed" if offset is None else "offset"
        raise ValueError(
            f"seed and offset must be given together (or both left None to use the "
            f"generator); got {given} alone"
        )
    seed_is_t, offset_is_t = isinstance(seed, torch.Tensor), isinstance(offset, torch.Tensor)
    if seed_is_t != offset_is_t:
        raise ValueError("seed and offset must both be tensors or both be scalars")
    if seed_is_t:
        return RandomArgs(
            use_generator=False,
            seed_arr=_seed_tensor("seed", seed, device, batch),
            offset_arr=_seed_tensor("offset", offset, device, batch),
        )
    for name, v in (("seed", seed), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name} must be an int or a 1-D int64/uint64 tensor, got {_kind(v)}")
    return RandomArgs(use_generator=False, seed=to_int64(int(seed)), offset=to_int64(int(offset)))
