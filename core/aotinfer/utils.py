"""FlashInfer's ``flashinfer.utils`` names that user code imports: the attention enums and
``get_alibi_slopes``. The functions take the enums' names as strings (``"ROPE_LLAMA"``,
``"HND"``), as FlashInfer's do; these classes give the same names and codes (API.md 3.1)."""

from __future__ import annotations

from enum import Enum

from ._attention_utils import get_alibi_slopes

__all__ = ["MaskMode", "PosEncodingMode", "TensorLayout", "get_alibi_slopes"]


class PosEncodingMode(Enum):
    NONE = 0
    ROPE_LLAMA = 1
    ALIBI = 2


class MaskMode(Enum):
    NON_CAUSAL = 0
    CAUSAL = 1
    CUSTOM = 2
    MULTIITEMSCORING = 3


class TensorLayout(Enum):
    NHD = 0
    HND = 1
