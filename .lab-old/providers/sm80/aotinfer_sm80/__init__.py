"""aotinfer provider for compute capability 8.0, 8.6, 8.7, 8.9.

A100, A10, RTX 30xx, Jetson Orin, L4, L40, RTX 40xx.

Importing this package only names it; the kernels live in the extension module
`aotinfer_sm80._kernels`, which the core imports the first time a CUDA tensor on a device
served by this provider needs a kernel. `manifest.json` beside this file lists the build's
SASS targets and versions, so the core can choose a provider without importing any.
"""

ARCH = "sm80"
