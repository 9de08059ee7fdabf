#!/usr/bin/env bash
# One lab call on the GPU machine (the device tool): build + GPU suite (ci/gpu-test.sh), then
# each argument as a shell command, its output kept in $OUT/lab-<n>.txt. Carried wheels in
# .whl/ (the FlashInfer baseline) are installed to /tmp/site first when present.
#   ci/device-lab.sh 'python3 dev/ab_decode_occupancy.py' 'ncu ... python3 dev/ncu_targets.py'
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
fi
export PYTHONUNBUFFERED=1
[ -f .commit ] && export AOTINFER_COMMIT=$(cat .commit)
out=${OUT:-/tmp/lab-out}
mkdir -p "$out"
ci/gpu-test.sh ${PYTEST_ARGS:-} > "$out/gpu-suite.txt" 2>&1
rc=$?
tail -n 25 "$out/gpu-suite.txt"
n=0
for cmd in "$@"; do
  n=$((n + 1))
  echo "=== lab-$n: $cmd"
  bash -c "$cmd" 2>&1 | tee "$out/lab-$n.txt" | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit $rc
