"""Helpers shared by the attention API (decode, page, cascade): the string options with
FlashInfer's KeyError texts, paged-cache unpacking, ALiBi slopes, the output-buffer and
workspace checks, dtype names and scalar scales. Pure torch; importing it touches no CUDA.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple, Union

import torch

KV_LAYOUTS = {"NHD": 0, "HND": 1}
POS_ENCODING_MODES = {"NONE": 0, "ROPE_LLAMA": 1, "ALIBI": 2}

# Head dims the decode kernels are built for (the provider's kernel table has the same list).
HEAD_DIMS_BUILT = (64, 128, 256)
Q_DTYPES = (torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
# CUDA's grid limits: grid.x up to 2**31 - 1 blocks, grid.y and grid.z up to 65535 each. The
# merge kernels (cascade's, and the split-KV merge of both decodes) launch one block per
# (row, head) with the heads in grid.y.
MAX_GRID_X, MAX_GRID_YZ = 2**31 - 1, 65535
MAX_HEADS = MAX_GRID_YZ

PagedKVCache = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_kv_layout(kv_layout: str) -> int:
    """The layout code (NHD 0, HND 1); ``KeyError("Invalid kv_layout x")`` otherwise."""
    if not isinstance(kv_layout, str) or kv_layout not in KV_LAYOUTS:
        raise KeyError(f"Invalid kv_layout {kv_layout}")
    return KV_LAYOUTS[kv_layout]


def check_pos_encoding_mode(pos_encoding_mode: str) -> int:
    """The mode code (NONE 0, ROPE_LLAMA 1, ALIBI 2); KeyError as FlashInfer otherwise."""
    if not isinstance(pos_encoding_mode, str) or pos_encoding_mode not in POS_ENCODING_MODES:
        raise KeyError(f"Invalid pos_encoding_mode {pos_encoding_mode}")
    return POS_ENCODING_MODES[pos_encoding_mode]


def unpack_paged_kv_cache(
    paged_kv_cache: PagedKVCache, kv_layout: str
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(k_cache, v_cache)``, each 4-D, from a 5-D tensor or a ``(k, v)`` tuple.

    A 5-D cache is ``(pages, 2, page_size, H_kv, D)`` (NHD) or ``(pages, 2, H_kv, page_size,
    D)`` (HND); its halves are returned as views. Shapes are checked by the caller.
    """
    check_kv_layout(kv_layout)
    if isinstance(paged_kv_cache, torch.Tensor):
        if paged_kv_cache.dim() != 5 or paged_kv_cache.size(1) != 2:
            raise ValueError(
                "paged_kv_cache as one tensor must be 5-D, (max_num_pages, 2, page_size, "
                "num_kv_heads, head_dim) for NHD or (max_num_pages, 2, num_kv_heads, page_size, "
                f"head_dim) for HND, got shape {tuple(paged_kv_cache.shape)}"
            )
        return paged_kv_cache[:, 0], paged_kv_cache[:, 1]
    if (
        isinstance(paged_kv_cache, (tuple, list))
        and len(paged_kv_cache) == 2
        and all(isinstance(t, torch.Tensor) for t in paged_kv_cache)
    ):
        return paged_kv_cache[0], paged_kv_cache[1]
    raise KeyError(
        f"Unrecognized paged_kv_cache type {type(paged_kv_cache)}, expect a single tensor or "
        "a tuple of tensor."
    )


def check_head_dim_contiguous(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Both halves of a paged cache with a contiguous last (head_dim) dimension: the kernels
    read each row of it as one run of memory (the cache is not copied to make it so)."""
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError(
            "paged_kv_cache must have a contiguous last (head_dim) dimension, got strides "
            f"{tuple(k_cache.stride())} and {tuple(v_cache.stride())} (k and v halves)"
        )


def cache_geometry(k_cache: torch.Tensor, kv_layout: str) -> Tuple[int, int, int, int]:
    """``(num_pages, page_size, num_kv_heads, head_dim)`` of a 4-D cache half."""
    if k_cache.dim() != 4:
        raise ValueError(
            f"each half of paged_kv_cache must be 4-D, got shape {tuple(k_cache.shape)}"
        )
    pages, a, b, d = k_cache.shape
    return (pages, a, b, d) if kv_layout == "NHD" else (pages, b, a, d)


def get_alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi slopes, ``(n_heads,)`` float32, FlashInfer's (and the ALiBi paper's) recipe.

    ``n = 2**floor(log2(H))`` heads get ``m0**[1..n]`` with ``m0 = 2**(-8/n)``; the remaining
    ``H - n`` heads get ``(2**(-4/n))**[1, 3, 5, ...]``.
    """
    n = 2 ** math.floor(math.log2(n_heads))
    m0 = 2.0 ** (-8.0 / n)
    slopes = torch.pow(m0, torch.arange(1, 1 + n, dtype=torch.float64))
    if n < n_heads:
        m1 = 2.0 ** (-4.0 / n)
        extra = torch.pow(m1, torch.arange(1, 1 + 2 * (n_heads - n), 2, dtype=torch.float64))
        slopes = torch.cat([slopes, extra])
    return slopes.to(torch.float32)


def check_shape_dtype_device(
    t: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device, name: str
) -> None:
    """A user-supplied output buffer, with FlashInfer's messages."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"Invalid shape of {name}: expected {tuple(shape)}, got {tuple(t.shape)}")
    if t.dtype != dtype:
        raise ValueError(f"Invalid dtype of {name}: expected {dtype}, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"Invalid device of {name}: expected {device}, got {t.device}")


def check_workspace(name: str, buf) -> torch.Tensor:
    """A workspace buffer: a contiguous tensor whose address is 16-byte aligned."""
    if not isinstance(buf, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(buf).__name__}")
    if not buf.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(buf.stride())}")
    r = buf.data_ptr() % 16
    if r != 0:
        raise ValueError(f"{name} must be 16-byte aligned, got data_ptr % 16 = {r}")
    return buf


def resolve_dtype(name: str, value) -> torch.dtype:
    """A torch.dtype from a dtype or its name (``"float16"`` -> ``torch.float16``)."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        dt = getattr(torch, value, None)
        if isinstance(dt, torch.dtype):
            return dt
    raise ValueError(f"{name} must be a torch.dtype or its name (e.g. 'float16'), got {value!r}")


# The kernels take scales as float32: a larger finite double would reach them as inf (and
# inf * tanh(0) or inf * 0 as NaN in every output).
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def as_int(value):
    """``value`` as a Python int where it is an integer other than bool (a NumPy integer
    from a model config, say); anything else unchanged, for the caller's check to refuse."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def scale_value(name: str, value) -> float:
    """A positive finite scale given as None (1.0), a number or a one-element CPU tensor.

    A CUDA tensor is refused: reading it would synchronise the host with the device.
    """
    if value is None:
        return 1.0
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{name} must be a float or a one-element tensor, got shape {tuple(value.shape)}"
            )
        if value.device.type != "cpu":
            raise ValueError(
                f"{name} must be a Python float (or a CPU tensor); a {value.device} tensor "
                "would need a host-device sync"
            )
        value = value.item()  # (a bool or complex one is refused below, as the scalar is)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy floats too
        raise ValueError(f"{name} must be a float, got {value!r}")
    value = float(value)
    if not (0 < value <= FLOAT32_MAX):
        raise ValueError(f"{name} must be positive and finite as a float32, got {value!r}")
    return value


def check_head_dim(head_dim: int, what: str = "head_dim") -> int:
    if isinstance(head_dim, bool) or not isinstance(head_dim, int):
        raise ValueError(f"{what} must be an int, got {head_dim!r}")
    if head_dim not in HEAD_DIMS_BUILT:
        built = ", ".join(str(d) for d in HEAD_DIMS_BUILT)
        raise ValueError(
            f"{what} {head_dim} is not built; aotinfer decode kernels exist for head_dim {built}"
        )
    return head_dim


def check_heads(num_qo_heads: int, num_kv_heads: int) -> None:
    """Positive ints, at most :data:`MAX_HEADS` (checked before anything is sized by them:
    a head count of 2**62 once hung plan()'s cost model), the KV heads dividing the query
    heads."""
    for name, v in (("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
        if v > MAX_HEADS:
            raise ValueError(
                f"{name} must be at most {MAX_HEADS} (the merge kernels' grid.y holds the "
                f"heads), got {v}"
            )
    if num_qo_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_qo_heads ({num_qo_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )


def check_window_left(window_left) -> int:
    """An int >= -1 (NumPy integers too). Above 2**63 - 1 (the kernels' int64) it is clamped
    there: a window wider than any cache means the same, every key."""
    window_left = as_int(window_left)
    if isinstance(window_left, bool) or not isinstance(window_left, int) or window_left < -1:
        raise ValueError(f"window_left must be an int >= -1 (-1: no window), got {window_left!r}")
    return min(window_left, 2**63 - 1)


def _real(name: str, value) -> float:
    """float(value), or a ValueError naming the argument (not float()'s own text). A
    one-element CPU tensor is read (.item()) and checked as the number it holds: a bool or
    complex one is refused as the scalar is (float() of it gave 1.0, or torch's
    RuntimeError), and so is a meta tensor (which holds no value). A CUDA tensor is refused
    as scale_value refuses it: reading it would synchronise the host with the device (and
    fail inside a CUDA-graph capture)."""
    number = value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_cpu:
        number = value.item()
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise ValueError(f"{name} must be a float, got {value!r}")
    return float(number)


def soft_cap_value(logits_soft_cap: Optional[float]) -> float:
    if logits_soft_cap is None:
        return 0.0
    cap = _real("logits_soft_cap", logits_soft_cap)
    if not (0 <= cap <= FLOAT32_MAX):
        raise ValueError(
            "logits_soft_cap must be >= 0 and finite as a float32 (0 or None: off), got "
            f"{logits_soft_cap!r}"
        )
    return cap


def positive_float(name: str, value: Optional[float], default: float) -> float:
    if value is None:
        return default
    v = _real(name, value)
    if not (0 < v <= FLOAT32_MAX):
        raise ValueError(f"{name} must be positive and finite as a float32, got {value!r}")
    return v


def check_kv_dtype(kv_dtype: torch.dtype, q_dtype: torch.dtype, what: str) -> None:
    if kv_dtype != q_dtype and kv_dtype not in FP8_DTYPES:
        raise ValueError(
            f"{what} must be the query dtype ({dtype_name(q_dtype)}) or float8_e4m3fn / "
            f"float8_e5m2, got {dtype_name(kv_dtype)}"
        )


def check_q_dtype(q_dtype: torch.dtype, what: str) -> None:
    if q_dtype not in Q_DTYPES:
        raise ValueError(f"{what} must be float16 or bfloat16, got {dtype_name(q_dtype)}")
