"""Pure-PyTorch implementations of aotinfer's kernels: the path for CPU tensors and the
oracle the GPU tests compare against. They follow FlashInfer's semantics, favour clarity
over speed, and compute in float32 (float64 where a test asks for it)."""

from .sampling import softmax

__all__ = ["softmax"]
