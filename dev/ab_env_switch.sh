#!/usr/bin/env bash
# A/B of one environment switch in one build (a lab tool, GPU machine): runs a timing script
# (JSON {"us": {case: us}, "tokens": {...}} to the path it is given first, then ARGS) with
# VAR=A, VAR=B, VAR=A, VAR=B (one process each) and prints per case the medians, B / A and
# whether the tokens agree (dev/compare_graph_times.py). Session 9's gather A/Bs, as one call:
#   dev/ab_env_switch.sh AOTINFER_SAMPLING_GATHER off on dev/time_sampling_graph.py 128 512
set -euo pipefail
cd "$(dirname "$0")/.."
var=$1 a=$2 b=$3 script=$4
shift 4
tmp=$(mktemp -d)
for round in 1 2; do
  for side in a b; do
    value=$([ $side = a ] && echo "$a" || echo "$b")
    env "$var=$value" python3 "$script" "$tmp/$side-$round.json" "$@" > "$tmp/$side-$round.log" 2>&1 ||
      { cat "$tmp/$side-$round.log"; exit 1; }
  done
done
echo "A: $var=$a  B: $var=$b  (one process each, A B A B)"
python3 dev/compare_graph_times.py "$tmp/a-1.json" "$tmp/a-2.json" "$tmp/b-1.json" "$tmp/b-2.json"
