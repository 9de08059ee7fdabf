#!/usr/bin/env bash
# Prints the aotinfer provider that serves GPU 0 (sm90a, ...), or nothing when no CUDA device
# is visible or no provider serves it. Used by the build, test and lab scripts, which must all
# agree on the name. The GPU comes from the driver (cuda-python, as the core's choice reads
# it), so a CPU-only torch build does not hide it; torch only where the driver cannot say.
cd "$(dirname "$0")/.."
PYTHONPATH=core${PYTHONPATH:+:$PYTHONPATH} exec "${PYTHON:-python3}" -c '
from aotinfer import _device_facts
from aotinfer._arches import suggested_provider

gpus = _device_facts.driver_facts().gpus
capability = gpus[0].capability if gpus else None
if capability is None:
    import torch

    if torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability(0))
print((suggested_provider(capability) or "") if capability else "")'
