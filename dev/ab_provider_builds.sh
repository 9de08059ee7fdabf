#!/usr/bin/env bash
# A/B of two builds of this machine's provider that differ in CMake defines (a lab tool, GPU
# machine): builds wheel A and wheel B (A "-": the wheel ci/gpu-test.sh left in dist/), then runs a timing script (JSON {"us": {case: us},
# "tokens": {...}} to the path it is given) under A, B, A, B (one process each, a reinstall
# between), and prints per case the two medians and B / A, and whether the tokens agree.
#   dev/ab_provider_builds.sh - "-DSOME_DEFINE=1" dev/time_sampling_graph.py   (CMAKE_ARGS of build B)
set -euo pipefail
cd "$(dirname "$0")/.."
defs_a=$1 defs_b=$2 script=$3
out=${OUT:-/tmp/ab-out}
mkdir -p "$out" /tmp/ab-wheels/a /tmp/ab-wheels/b
arch=$(PYTHONPATH=core python3 -c '
import torch
from aotinfer._arches import suggested_provider
print(suggested_provider(torch.cuda.get_device_capability(0)))')
for v in a b; do
  defs=$([ $v = a ] && echo "$defs_a" || echo "$defs_b")
  if [ "$defs" = "-" ]; then cp dist/aotinfer_"$arch"-*.whl /tmp/ab-wheels/$v/; continue; fi
  rm -rf "providers/$arch/build"
  CMAKE_ARGS="$defs" python3 -m pip wheel -q --no-build-isolation --no-deps "providers/$arch" -w /tmp/ab-wheels/$v
done
for round in 1 2; do
  for v in a b; do
    python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/$v/*.whl
    python3 "$script" "/tmp/ab-$v-$round.json"
  done
done
python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/a/*.whl  # A stays installed
python3 - "$defs_a" "$defs_b" <<'PY' | tee "$out/ab-provider-builds.txt"
import json, statistics, sys
runs = {v: [json.load(open(f"/tmp/ab-{v}-{r}.json")) for r in (1, 2)] for v in "ab"}
print(f"A: {sys.argv[1]}  B: {sys.argv[2]}  (us per call, two processes each, A B A B)")
for case in runs["a"][0]["us"]:
    a = [r["us"][case] for r in runs["a"]]
    b = [r["us"][case] for r in runs["b"]]
    same = all(r["tokens"].get(case) == runs["a"][0]["tokens"].get(case) for r in runs["a"] + runs["b"])
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{case:34s} A {a[0]:7.1f} {a[1]:7.1f}  B {b[0]:7.1f} {b[1]:7.1f}  B/A {mb / ma:5.3f}"
          + ("" if same else "  TOKENS DIFFER"))
PY
