#!/usr/bin/env bash
# One call on the GPU machine: build + GPU tests, then the benchmarks named as arguments
# (default: all of benchmarks/bench_*.py), through ci/device-lab.sh (which installs the
# carried wheels in .whl/ first: the FlashInfer baseline, see shared BASELINES.md).
#   ci/device-run.sh [bench_softmax ...]
# REQUIRE_CARD=H200: run only where nvidia-smi names such a card; anything else exits at once
# (rc 0), so a machine of another kind costs its start and not a whole record.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${REQUIRE_CARD:-}" ]; then
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  case "$card" in
    *"$REQUIRE_CARD"*) ;;
    *) echo "card: $card, not $REQUIRE_CARD: nothing run"; exit 0 ;;
  esac
fi
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
  benches=($(cd benchmarks && ls bench_*.py | sed 's/\.py$//'))
fi
cmds=()
for b in "${benches[@]}"; do cmds+=("python3 benchmarks/$b.py ${BENCH_ARGS:-}"); done
# Each benchmark writes its results under $OUT itself (bench_common.write_results).
LAB_LOGS=0 exec ci/device-lab.sh "${cmds[@]}"
