#!/usr/bin/env bash
# Nsight Compute of dev/ncu_targets.py CASES under the default build and under each lab macro
# in LABS, in one machine start (a lab tool, GPU machine): the default is the wheel
# ci/gpu-test.sh left in dist/, each lab its own wheel (dev/build_lab_wheels.sh), and each
# build's report goes to $OUT/ncu-<default|name>.txt (launch, occupancy, warp states, instruction
# and memory counts per kernel launch). The default stays installed at the end.
#   LABS="AOTINFER_LAB_X" dev/ncu_labs.sh joint
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ncu-labs}
labs=(${LABS:?LABS names the lab macros})
mkdir -p "$out"
dev/build_lab_wheels.sh /tmp/ncu-wheels default "${labs[@]}"
for v in default "${labs[@]}"; do
  python3 -m pip install -q --no-deps --force-reinstall /tmp/ncu-wheels/$v/*.whl
  ncu --profile-from-start off --clock-control none --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section InstructionStats \
    --section MemoryWorkloadAnalysis python3 dev/ncu_targets.py "$@" > "$out/ncu-$v.txt" 2>&1
  echo "== $v: $(grep -c '^  [a-z_]*kernel' "$out/ncu-$v.txt" || true) kernel reports in $out/ncu-$v.txt"
done
python3 -m pip install -q --no-deps --force-reinstall /tmp/ncu-wheels/default/*.whl
