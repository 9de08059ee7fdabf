"""aotinfer provider for compute capability 10.0 (B200, GB200).

Importing this package only names it; the kernels live in the extension module
`aotinfer_sm100a._kernels`, which the core imports the first time a CUDA tensor on a device
served by this provider needs a kernel. `manifest.json` beside this file lists the build's
SASS targets and versions, so the core can choose a provider without importing any.
"""

ARCH = "sm100a"
