#!/usr/bin/env bash
# A/B of several lab macros in one machine start (a lab tool, GPU machine): A is the wheel
# ci/gpu-test.sh left in dist/ (the default build of this tree); each name in LABS is built
# as its own wheel with -DCMAKE_CUDA_FLAGS=-D<name> (the tree holds every lab's code behind
# its macro). The timing script (as dev/ab_provider_builds.sh's) runs under A, B1 .. Bn, A,
# B1 .. Bn, one process each, and per lab dev/compare_graph_times.py prints A against it
# ($OUT/ab-<name>.txt). With LAB_TESTS (a pytest command), it runs under each lab's wheel
# (its last lines appended to that file).
# A stays installed at the end. One build fewer and one machine start fewer than a call of
# dev/ab_provider_builds.sh per lab.
#   LABS="AOTINFER_LAB_X AOTINFER_LAB_Y" LAB_TESTS='python3 -m pytest -q tests/gpu/test_sampling.py' \
#     dev/ab_provider_labs.sh dev/time_sampling_graph.py 128 512
set -euo pipefail
cd "$(dirname "$0")/.."
script=$1
shift
out=${OUT:-/tmp/ab-out}
labs=(${LABS:?LABS names the lab macros})
mkdir -p "$out"
dev/build_lab_wheels.sh /tmp/ab-wheels a "${labs[@]}"
for round in 1 2; do
  for v in a "${labs[@]}"; do
    python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/$v/*.whl
    python3 "$script" "/tmp/ab-$v-$round.json" "$@"
  done
done
for lab in "${labs[@]}"; do
  {
    echo "A: -  B: -D$lab  (us per call, two processes each, A B1 .. Bn A B1 .. Bn)"
    python3 dev/compare_graph_times.py /tmp/ab-a-1.json /tmp/ab-a-2.json /tmp/ab-$lab-1.json /tmp/ab-$lab-2.json
  } | tee "$out/ab-$lab.txt"
  if [ -n "${LAB_TESTS:-}" ]; then
    python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/$lab/*.whl
    # The tests' tail goes into the lab's file too, so a caller that drops stdout keeps it.
    { echo "tests under -D$lab: $LAB_TESTS"; bash -c "$LAB_TESTS" 2>&1 | tail -n 3; } | tee -a "$out/ab-$lab.txt"
  fi
done
python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/a/*.whl  # A stays installed
