#!/usr/bin/env bash
# One lab call on the GPU machine (the device tool): build + GPU suite (ci/gpu-test.sh), then
# each argument as a shell command, its output kept in $OUT/lab-<n>.txt (LAB_LOGS=0: not
# kept; the device tool brings back 8 files at most). Carried wheels in .whl/ (the
# FlashInfer baseline) are installed to /tmp/site first when present.
#   ci/device-lab.sh 'python3 dev/time_sampling_graph.py $OUT/graph.json' 'ncu ... python3 dev/ncu_targets.py'
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
fi
export PYTHONUNBUFFERED=1
# .commit (git rev-parse --short=12 HEAD > .commit, ignored by git: carried with the call)
# names the commit the results report.
[ -f .commit ] && export AOTINFER_COMMIT=$(cat .commit)
out=${OUT:-/tmp/lab-out}
mkdir -p "$out"
ci/gpu-test.sh ${PYTEST_ARGS:-} > /tmp/gpu-suite.txt 2>&1  # its log also goes to $OUT
rc=$?
tail -n 25 /tmp/gpu-suite.txt
n=0
for cmd in "$@"; do
  n=$((n + 1))
  echo "=== lab-$n: $cmd"
  log=/dev/null
  [ "${LAB_LOGS:-1}" = 1 ] && log="$out/lab-$n.txt"
  bash -c "$cmd" 2>&1 | tee "$log" | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
# OUT_TAR=1: pack everything under $OUT into one out.tgz, since the device tool brings back
# 8 files at most and a suite plus three benchmarks write more.
if [ "${OUT_TAR:-0}" = 1 ]; then
  (cd "$out" && tar czf /tmp/out.tgz . && find . -mindepth 1 -delete && mv /tmp/out.tgz .)
fi
exit $rc
