#!/usr/bin/env bash
# The slice kernels' phase trace in one call (a lab tool, GPU machine, after ci/gpu-test.sh
# left the default wheel in dist/): builds the provider with -DAOTINFER_LAB_SLICE_TRACE,
# installs it, runs dev/trace_slice_phases.py on the distributions named (default: peaked
# flat) into $OUT/trace-slice-phases.txt and prints its summary, then reinstalls the default.
#   dev/trace_slice_lab.sh [DIST ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/lab-out}
mkdir -p "$out"
dev/build_lab_wheels.sh /tmp/trace-wheels default AOTINFER_LAB_SLICE_TRACE
python3 -m pip install -q --no-deps --force-reinstall /tmp/trace-wheels/AOTINFER_LAB_SLICE_TRACE/*.whl
trap 'python3 -m pip install -q --no-deps --force-reinstall /tmp/trace-wheels/default/*.whl' EXIT
dists=("$@")
[ ${#dists[@]} -gt 0 ] || dists=(peaked flat)
python3 dev/trace_slice_phases.py "${dists[@]}" > "$out/trace-slice-phases.txt"
python3 dev/trace_slice_phases.py --summary "$out/trace-slice-phases.txt" | tee "$out/trace-slice-phases-summary.txt"
