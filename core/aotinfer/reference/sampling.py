"""Reference sampling functions (see aotinfer.sampling for the contracts)."""

from __future__ import annotations

from typing import Optional, Union

import torch


def softmax(
    logits: torch.Tensor,
    temperature: Optional[Union[torch.Tensor, float]] = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """softmax(logits / temperature) over the last dimension, returned as float32.

    ``temperature`` is None (1.0), a float, or a (B,) tensor with one value per row. A row
    holding a NaN, or only -inf, comes out NaN, like ``torch.softmax``.
    """
    x = logits.to(compute_dtype)
    if isinstance(temperature, torch.Tensor):
        x = x / temperature.to(device=x.device, dtype=compute_dtype).unsqueeze(-1)
    elif temperature is not None:
        x = x / float(temperature)
    return torch.softmax(x, dim=-1).to(torch.float32)
