"""torch.Tensor -> provider view, the current stream, and the validation helpers every
public function uses before any launch. Messages name the argument, what was expected and
what was given.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

import torch

# Shared with providers/csrc/common/tensor_view.h (enum class DType); keep both in step.
DTYPE_CODES = {
    torch.float32: 0,
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.uint8: 5,
    torch.bool: 6,
    torch.float8_e4m3fn: 7,
    torch.float8_e5m2: 8,
}
if hasattr(torch, "uint64"):
    DTYPE_CODES[torch.uint64] = 9

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
F32_CODE = DTYPE_CODES[torch.float32]  # for views built on hot paths without a dict lookup
BOOL_CODE = DTYPE_CODES[torch.bool]

View = Tuple[int, int, Tuple[int, ...], Tuple[int, ...], int]


def view(t: Optional[torch.Tensor]) -> Optional[View]:
    """The framework-free view the provider ABI takes: (ptr, dtype code, shape, strides, device)."""
    if t is None:
        return None
    return (t.data_ptr(), DTYPE_CODES[t.dtype], tuple(t.shape), tuple(t.stride()), t.device.index)


def matrix_view(ptr: int, code: int, rows: int, cols: int, index: Optional[int]) -> View:
    """The view of a contiguous ``(rows, cols)`` matrix the caller just allocated, built
    without asking the tensor (each accessor is host time on the eager path); strides as
    torch reports them, also for ``cols == 0``."""
    return (ptr, code, (rows, cols), (max(cols, 1), 1), index)


# torch's own raw-stream query (what its generated kernels call): one C call of a few
# hundred ns, where torch.cuda.current_stream builds a Stream object (microseconds).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_handle(device: torch.device) -> int:
    """The raw handle of the current CUDA stream on ``device``."""
    if _raw_stream is not None and device.index is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


# torch's own query behind torch.cuda.is_current_stream_capturing, without the Python frame
# around it (0.3-0.6 us per call on the H200 host for the public function).
_raw_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def stream_capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph; False where torch has no CUDA
    (a stand-in generator in the CPU tests). Cheaper than asking ``is_available`` first."""
    try:
        if _raw_capturing is not None:
            return _raw_capturing()
        return torch.cuda.is_current_stream_capturing()
    except (RuntimeError, AssertionError):
        return False


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    value,
    *,
    ndim: Optional[int] = None,
    dtypes: Optional[Tuple[torch.dtype, ...]] = None,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Checks a tensor argument and returns it; raises ValueError naming ``name`` otherwise."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout is not torch.strided or value.is_nested:  # (check_dense, inlined)
        check_dense(name, value)
    if ndim is not None and value.dim() != ndim:
        raise ValueError(
            f"{name} must be a {ndim}-D tensor, got {value.dim()}-D with shape {tuple(value.shape)}"
        )
    if dtypes is not None and value.dtype not in dtypes:
        raise ValueError(
            f"{name} must have dtype {_dtype_names(dtypes)}, "
            f"got {str(value.dtype).replace('torch.', '')}"
        )
    if device is not None and value.device != device:
        raise ValueError(f"{name} must be on {device}, got {value.device}")
    return value


def check_dense(name: str, value: torch.Tensor) -> None:
    """A sparse, nested or MKL-DNN tensor would fail deep inside torch, or at data_ptr():
    refused here, naming the argument."""
    if value.layout is not torch.strided or value.is_nested:
        kind = "nested" if value.is_nested else str(value.layout).replace("torch.", "")
        raise ValueError(f"{name} must be a dense (strided) tensor, got a {kind} tensor")


def flag(name: str, value) -> bool:
    """A bool argument, read as Python's truth value (as FlashInfer reads it), except that a
    tensor of other than one element is refused naming ``name``: ``bool()`` of it raises
    torch's own "ambiguous" RuntimeError, which names no argument; so does any other value
    whose truth value raises (a NumPy array of several elements). (True and False return
    at once: this runs on every call.)"""
    if value is True or value is False:
        return value
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        raise ValueError(
            f"{name} must be a bool, got a tensor of {value.numel()} elements with shape "
            f"{tuple(value.shape)}"
        )
    try:
        return bool(value)
    except Exception as e:  # (NumPy's ValueError; anything a __bool__ raises)
        raise ValueError(f"{name} must be a bool, got {type(value).__name__}: {e}") from e


def check_device_supported(name: str, t: torch.Tensor) -> None:
    """Only CPU (reference path) and CUDA (provider path) tensors are served. (is_cuda and
    is_cpu, not device.type: this runs on every call; 0.15 against 0.60 us on the CI
    machine's CPU.)"""
    if not (t.is_cuda or t.is_cpu):
        raise ValueError(f"{name} must be a CUDA or CPU tensor, got device {t.device}")


def per_row_tensor(
    name: str, value: torch.Tensor, rows: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """A per-row parameter: 1-D of length ``rows`` on ``device``, as contiguous ``dtype``."""
    check_dense(name, value)
    if value.dim() != 1:
        raise ValueError(
            f"{name} must be a scalar or a 1-D tensor of shape ({rows},), got a {value.dim()}-D "
            f"tensor of shape {tuple(value.shape)}"
        )
    if value.size(0) != rows:
        raise ValueError(
            f"{name} must have length {rows} (one per row), got length {value.size(0)}"
        )
    if value.device != device:
        raise ValueError(f"{name} must be on {device}, like the input, got {value.device}")
    return value.to(dtype).contiguous()
