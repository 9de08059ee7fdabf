#!/usr/bin/env bash
# On a machine with a GPU: build the provider for the visible GPU (offline, no isolation),
# install it with the core, run the GPU suite (pytest -m gpu) and write its summary to
# benchmarks/results/gpu-tests.md (and to $OUT when set, for the device tool).
#   ci/gpu-test.sh [pytest args...]      (GPU_TESTS=paths narrows the suite; PREBUILT=1 below)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

arch=$(PYTHON=$PY ci/provider-arch.sh)
if [ -z "$arch" ]; then echo "no aotinfer provider serves this GPU" >&2; exit 1; fi

start=$(date +%s)
# PREBUILT=1: install the provider wheel already in dist/ (built elsewhere from this tree for
# this Python by ci/prebuild.sh, and carried with the call) instead of building it; the build
# is ~2 minutes of scarce GPU-machine time. The wheel is used only where its digest
# (dist/aotinfer_<arch>.digest) matches this tree's provider sources, so that a stale wheel
# cannot report on sources it was not built from; otherwise, or where this Python cannot
# install it, the provider is built here.
prebuilt_matches() {
  [ -f dist/aotinfer_"$arch".digest ] && ls dist/aotinfer_"$arch"-*.whl >/dev/null 2>&1 || {
    echo "PREBUILT=1: no wheel with a digest in dist/ (ci/prebuild.sh writes both): building here"; return 1; }
  local have want
  have=$(cat dist/aotinfer_"$arch".digest)
  want=$(ci/provider-digest.sh "$arch")
  [ "$have" = "$want" ] || {
    echo "PREBUILT=1: dist/'s wheel was built from provider sources $have, this tree's are $want: building here"
    return 1; }
}
if [ "${PREBUILT:-0}" = 1 ] && prebuilt_matches &&
   $PY -m pip install -q --no-deps --no-build-isolation --force-reinstall dist/aotinfer_"$arch"-*.whl ./core; then
  echo "installed the prebuilt $(ls dist/aotinfer_"$arch"-*.whl)"
else
  # A clean build (no build tree carried from another source), by the one recipe that also
  # stamps the wheel with its sources' digest.
  rm -rf "providers/$arch/build"
  PYTHON=$PY ci/prebuild.sh "$arch"
  $PY -m pip install -q --no-deps --no-build-isolation --force-reinstall dist/aotinfer_"$arch"-*.whl ./core
fi
echo "built and installed aotinfer-$arch in $(( $(date +%s) - start )) s"
(cd /tmp && $PY -m aotinfer show-config)

mkdir -p benchmarks/results
log=$(mktemp)
set +e
$PY -m pytest ${GPU_TESTS:-tests/gpu} -m gpu -q -p no:cacheprovider "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
{
  echo "# GPU test suite"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  # The device tree travels without .git (a stale HEAD may be found there, so under the device
  # tool, $OUT set, git is not asked): the caller names the commit.
  commit=${AOTINFER_COMMIT:-}
  if [ -z "$commit" ] && [ -z "${OUT:-}" ]; then commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true); fi
  echo "- commit: ${commit:-unknown (the caller did not name it)}"
  echo "- GPU: $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | head -1)"
  echo "- provider: aotinfer-$arch; torch $($PY -c 'import torch; print(torch.__version__)')"
  echo "- command: ci/gpu-test.sh $*"
  echo "- tests: ${GPU_TESTS:-tests/gpu}"
  echo
  echo '```'
  grep -E "passed|failed|error|skipped" "$log" | tail -n 15
  echo '```'
} > benchmarks/results/gpu-tests.md
if [ -n "${OUT:-}" ]; then cp benchmarks/results/gpu-tests.md "$log" "$OUT/" 2>/dev/null || true; fi
exit "$rc"
