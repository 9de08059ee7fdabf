"""Sampling kernels with FlashInfer's API (``flashinfer.sampling``).

CUDA tensors run on the provider chosen for their device; CPU tensors run on the pure-PyTorch
reference (``aotinfer.reference``). There is no fallback from CUDA to the reference path.
Every argument is validated here, before any launch.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from . import _views
from . import reference as _ref

__all__ = ["softmax"]


def _provider(t: torch.Tensor):
    from ._providers import provider_for_device

    return provider_for_device(t.device.index if t.device.index is not None else 0)


def _logits_matrix(name: str, logits) -> torch.Tensor:
    _views.check_tensor(name, logits, ndim=2)
    _views.check_device_supported(name, logits)
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


def _temperature(
    temperature, logits: torch.Tensor
) -> Tuple[float, Optional[torch.Tensor]]:
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
    return _views.check_positive_scalar("temperature", temperature), None


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
        ``None`` (1.0), a positive float for every row, or a ``(batch_size,)`` float tensor
        with one temperature per row (values are not checked on the device; a zero or
        negative temperature gives inf/NaN rows).
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
    if logits.device.type == "cpu":
        return _ref.softmax(logits, per_row if per_row is not None else scalar)
    provider = _provider(logits)
    if enable_pdl is None:
        enable_pdl = provider.capability[0] >= 9
    probs = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    provider.kernels.softmax(
        _views.view(logits),
        _views.view(probs),
        _views.view(per_row),
        scalar,
        bool(enable_pdl),
        _views.stream_handle(logits.device),
    )
    return probs
