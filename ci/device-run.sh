#!/usr/bin/env bash
# One call on the GPU machine: build + GPU tests, then the benchmarks named as arguments
# (default: all of benchmarks/bench_*.py), through ci/device-lab.sh (which installs the
# carried wheels in .whl/ first: the FlashInfer baseline, see shared BASELINES.md).
#   ci/device-run.sh [bench_softmax ...]
set -uo pipefail
cd "$(dirname "$0")/.."
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
  benches=($(cd benchmarks && ls bench_*.py | sed 's/\.py$//'))
fi
cmds=()
for b in "${benches[@]}"; do cmds+=("python3 benchmarks/$b.py ${BENCH_ARGS:-}"); done
# Each benchmark writes its results under $OUT itself (bench_common.write_results).
LAB_LOGS=0 exec ci/device-lab.sh "${cmds[@]}"
