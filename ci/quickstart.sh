#!/usr/bin/env bash
# The main job of the README: build and install the core and, when this machine has an
# NVIDIA GPU that a provider serves, that provider; then run examples/quickstart.py, which
# uses the GPU kernel when there is one and the CPU reference path otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! $PY -c "import torch" 2>/dev/null; then
  $PY -m pip install -q torch==2.13.0  # on the dev/CI machines: the CPU build on local disk
fi
$PY -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" build "cmake>=3.26" ninja \
  "cuda-python>=12.6"
$PY -m pip install -q --no-build-isolation -e core

arch=$(PYTHON=$PY ci/provider-arch.sh)
if [ -n "$arch" ] && command -v "${CUDACXX:-nvcc}" >/dev/null; then
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  $PY -m pip wheel -q --no-build-isolation --no-deps "providers/$arch" -w dist
  $PY -m pip install -q --no-deps --force-reinstall dist/aotinfer_"$arch"-*.whl
elif [ -n "$arch" ]; then
  echo "GPU found but no nvcc: install the prebuilt provider with pip install 'aotinfer[$arch]'" >&2
fi
$PY -m aotinfer show-config  # (the interpreter installed into, not whatever is on PATH)
$PY examples/quickstart.py
