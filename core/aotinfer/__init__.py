"""aotinfer: FlashInfer-style GPU kernels for LLM serving, compiled ahead of time.

``import aotinfer as flashinfer`` works for the API covered here. Importing this package
loads no provider and initialises no CUDA: the provider for a device is found through the
entry-point group ``aotinfer.providers`` and imported the first time a CUDA tensor on that
device needs a kernel. CPU tensors run on the pure-PyTorch reference implementations.
"""

from ._version import __version__
from . import sampling
from .sampling import softmax

__all__ = ["__version__", "sampling", "softmax"]
