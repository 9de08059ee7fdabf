#!/usr/bin/env bash
# A/B of two versions of the pure-Python core on one provider build (a lab tool, GPU
# machine, after ci/device-lab.sh's build): A = the package under BASE (a directory holding
# aotinfer/, e.g. `git archive OLD core/aotinfer | tar -x -C .base-core`), B = this
# checkout's core/. Runs a host-time lab script (print_host_times lines) under A, B, A, B,
# one process each, and prints per part the medians of each side and B / A
# (dev/compare_host_times.py). Provider-only changes cannot be compared this way.
#   dev/ab_core_host.sh .base-core/core dev/time_sampling_host.py quick
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(cd "$1" && pwd) script=$2
shift 2
tmp=$(mktemp -d)
side_dir() { [ "$1" = a ] && echo "$base" || echo "$PWD/core"; }
for side in a b; do  # each side must import its own core, not the installed one
  dir=$(side_dir $side)
  grep -q "^$dir/aotinfer" <(PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
    'import aotinfer; print(aotinfer.__file__)') || { echo "side $side did not import $dir" >&2; exit 1; }
done
for round in 1 2; do
  for side in a b; do
    dir=$(side_dir $side)
    PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" python3 "$script" "$@" > "$tmp/$side-$round.txt" 2>&1 ||
      { cat "$tmp/$side-$round.txt"; exit 1; }
  done
done
echo "A: $base  B: $PWD/core  (one process each, A B A B)"
python3 dev/compare_host_times.py "$tmp/a-1.txt" "$tmp/a-2.txt" "$tmp/b-1.txt" "$tmp/b-2.txt"
