#!/usr/bin/env bash
# A/B of two provider wheels already built (a lab tool, GPU machine): e.g. A built from an
# older source tree carried with the call, B the wheel ci/gpu-test.sh left in dist/ ("-").
# Runs the timing script (JSON {"us": ..., "tokens": ...} to the path it is given) under A, B,
# A, B, one process each, prints dev/compare_graph_times.py's table ($OUT/AB_NAME.txt, default
# ab-wheels; LABEL_A / LABEL_B name the two in its header) and leaves B installed. WAIT_FOR
# names a file to wait for first (a build running beside the GPU suite writes it when done).
#   dev/ab_wheels.sh /tmp/old-wheel - dev/time_sampling_graph.py 1 16 128
set -euo pipefail
cd "$(dirname "$0")/.."
dir_a=$1 dir_b=$2 script=$3
shift 3
out=${OUT:-/tmp/ab-out}
mkdir -p "$out"
if [ -n "${WAIT_FOR:-}" ]; then
  for _ in $(seq 600); do [ -f "$WAIT_FOR" ] && break; sleep 1; done
fi
arch=$(ci/provider-arch.sh)
wheel() { if [ "$1" = "-" ]; then ls dist/aotinfer_"$arch"-*.whl; else ls "$1"/*.whl; fi; }
for round in 1 2; do
  for v in a b; do
    d=$([ $v = a ] && echo "$dir_a" || echo "$dir_b")
    python3 -m pip install -q --no-deps --force-reinstall "$(wheel "$d")"
    python3 "$script" "/tmp/abw-$v-$round.json" "$@" > /dev/null
  done
done
{
  echo "A: ${LABEL_A:-$dir_a}  B: ${LABEL_B:-$dir_b}  (us per call, two processes each, A B A B)"
  python3 dev/compare_graph_times.py /tmp/abw-a-1.json /tmp/abw-a-2.json /tmp/abw-b-1.json /tmp/abw-b-2.json
} | tee "$out/${AB_NAME:-ab-wheels}.txt"
