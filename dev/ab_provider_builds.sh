#!/usr/bin/env bash
# A/B of two builds of this machine's provider that differ in CMake arguments (a lab tool,
# GPU machine): builds wheel A and wheel B (A "-": the wheel ci/gpu-test.sh left in dist/),
# runs a timing script (JSON {"us": {case: us}, "tokens": {...}} to the path it is given)
# under A, B, A, B through dev/ab_wheels.sh (one process each, a reinstall between), which
# prints per case the medians, B / A and whether the tokens agree ($OUT/ab-provider-builds.txt).
# Arguments after the script go to it after the JSON path.
#   dev/ab_provider_builds.sh - "-DSOME_DEFINE=1" dev/time_sampling_graph.py 128 512   (CMAKE_ARGS of build B)
set -euo pipefail
cd "$(dirname "$0")/.."
defs_a=$1 defs_b=$2 script=$3
shift 3
out=${OUT:-/tmp/ab-out}
rm -rf /tmp/ab-wheels  # (a second call in one machine start must not reuse the first's wheels)
mkdir -p "$out" /tmp/ab-wheels/a /tmp/ab-wheels/b
arch=$(ci/provider-arch.sh)
for v in a b; do
  defs=$([ $v = a ] && echo "$defs_a" || echo "$defs_b")
  if [ "$defs" = "-" ]; then cp dist/aotinfer_"$arch"-*.whl /tmp/ab-wheels/$v/; continue; fi
  rm -rf "providers/$arch/build"
  CMAKE_ARGS="$defs" python3 -m pip wheel -q --no-build-isolation --no-deps "providers/$arch" -w /tmp/ab-wheels/$v
done
LABEL_A=$defs_a LABEL_B=$defs_b AB_NAME=ab-provider-builds dev/ab_wheels.sh /tmp/ab-wheels/a /tmp/ab-wheels/b \
  "$script" "$@"
python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/a/*.whl  # A stays installed
