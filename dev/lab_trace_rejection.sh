#!/usr/bin/env bash
# One device call for the rejection row kernels' time (a lab tool, GPU machine): builds a
# -lineinfo provider and a -DAOTINFER_LAB_ROW_TRACE one side by side (dev/build_beside.sh),
# collects and summarises the per-row timelines (dev/trace_rejection_rows.py; the default
# test, the exact pass pinned and 1024-thread CTAs pinned at 128 x 32000), then Nsight
# Compute's source lines of the same kernels (dev/ncu_lines.sh ... rejection). Everything
# lands in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/trace-out}
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation ./core
dev/build_beside.sh lineinfo=.:-DCMAKE_CUDA_FLAGS=-lineinfo "trace=.:-DCMAKE_CUDA_FLAGS=-DAOTINFER_LAB_ROW_TRACE"
tail -n 2 /tmp/lineinfo-build.log /tmp/trace-build.log
python3 -m pip install -q --no-deps --force-reinstall /tmp/trace-wheel/*.whl
python3 dev/trace_rejection_rows.py > "$out/trace.txt" 2>&1
AOTINFER_SAMPLING_TOP_P_TEST=pass python3 dev/trace_rejection_rows.py 128x32000 > "$out/trace-pass.txt" 2>&1
AOTINFER_SAMPLING_ROW_THREADS=1024 python3 dev/trace_rejection_rows.py 128x32000 > "$out/trace-1024.txt" 2>&1
for f in trace trace-pass trace-1024; do
  echo "### $f"
  python3 dev/trace_rejection_rows.py --summary "$out/$f.txt"
done | tee "$out/trace-summary.txt"
LINEINFO_BUILT=1 OUT="$out" dev/ncu_lines.sh sample_kernel rejection > "$out/lines.txt" 2>&1
tail -n 80 "$out/lines.txt"
