#!/usr/bin/env bash
# One call on the GPU machine: build + GPU tests (ci/gpu-test.sh), then the benchmarks named
# as arguments (default: all of benchmarks/bench_*.py). Carried wheels in .whl/ (FlashInfer
# baseline, see shared BASELINES.md) are installed to /tmp/site first when present.
#   ci/device-run.sh [bench_softmax ...]
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
fi
export PYTHONUNBUFFERED=1
# The tree travels without .git; a commit file written by the caller names it, if present.
[ -f .commit ] && export AOTINFER_COMMIT=$(cat .commit)
ci/gpu-test.sh ${PYTEST_ARGS:-}
rc=$?
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
  benches=($(cd benchmarks && ls bench_*.py | sed 's/\.py$//'))
fi
for b in "${benches[@]}"; do
  echo "=== $b"
  python3 "benchmarks/$b.py" ${BENCH_ARGS:-} || rc=1
done
exit $rc
