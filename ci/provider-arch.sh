#!/usr/bin/env bash
# Prints the aotinfer provider that serves GPU 0 (sm90a, ...), or nothing when no CUDA device
# is visible or no provider serves it. Used by the build, test and lab scripts, which must all
# agree on the name.
cd "$(dirname "$0")/.."
PYTHONPATH=core${PYTHONPATH:+:$PYTHONPATH} exec "${PYTHON:-python3}" -c '
import torch
from aotinfer._arches import suggested_provider
print((suggested_provider(torch.cuda.get_device_capability(0)) or "") if torch.cuda.is_available() else "")'
