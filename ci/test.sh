#!/usr/bin/env bash
# The test command of the README (and of .ci/run): on a machine without a GPU, install the
# tools, build the core and the sm75, sm90a and sm110a providers (the oldest target, the one
# we run on, and Thor: a broken build for any of them cannot land),
# then run the CPU suite and the packaging test against those wheels. GPU tests skip with a
# reason. On a GPU machine, ci/gpu-test.sh runs the GPU suite instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# torch first and pinned: on the CI machine 2.13.0 is the CPU build on local disk, and
# nothing else may pull a multi-GB CUDA build of torch.
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" build "cmake>=3.26" ninja \
  "cuda-python>=12.6" pytest
$PY -m pip install -q --no-build-isolation -e core

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The wheels' timestamps from the last commit, as a distribution's build would set them: the
# packaging test builds sm90a again at another path and expects the same bytes.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
export SOURCE_DATE_EPOCH
PYTHON=$PY AOTINFER_BUILD_ISOLATION=0 ci/build-wheels.sh sm75 sm90a sm110a

# One intra-op thread: the reference kernels on 2 shared cores slow down badly otherwise.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} AOTINFER_TEST_WHEELHOUSE="$PWD/dist" $PY -m pytest tests -q "$@"
