#!/usr/bin/env bash
# Source lines of a kernel's instructions (a lab tool, GPU machine): builds the provider with
# -lineinfo into /tmp/lineinfo-wheel (or, LINEINFO_BUILT=1, waits for dev/build_beside.sh's),
# installs it, runs Nsight Compute's SASS source page over dev/ncu_targets.py CASES
# ($OUT/ncu-src.csv.gz), disassembles the cubins that hold PATTERN (a kernel name) with
# nvdisasm -gi ($OUT/nvdisasm.txt.gz: the "//## File ..., line N" marks that map SASS offsets
# to source lines), prints dev/sass_lines.py's join of the two, then reinstalls the wheel
# ci/gpu-test.sh left in dist/.
#   dev/ncu_lines.sh sample_slice_kernel cluster
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=$1  # a kernel name: the cubins that hold it are disassembled
shift
out=${OUT:-/tmp/ncu-lines}
mkdir -p "$out" /tmp/lineinfo-wheel
arch=$(ci/provider-arch.sh)
if [ -n "${LINEINFO_BUILT:-}" ]; then
  # dev/build_beside.sh lineinfo=.:-DCMAKE_CUDA_FLAGS=-lineinfo built it beside the GPU suite.
  for _ in $(seq 600); do [ -f /tmp/lineinfo-wheel.done ] && break; sleep 1; done
else
  rm -rf "providers/$arch/build" /tmp/lineinfo-wheel/*
  CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-lineinfo" python3 -m pip wheel -q --no-build-isolation --no-deps \
    "providers/$arch" -w /tmp/lineinfo-wheel
fi
python3 -m pip install -q --no-deps --force-reinstall /tmp/lineinfo-wheel/*.whl
ncu --profile-from-start off --clock-control none --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv python3 dev/ncu_targets.py "$@" | gzip > "$out/ncu-src.csv.gz"
# The extension's fatbin holds one cubin per translation unit; keep those with $pattern.
so=$(python3 -c "import importlib, glob, os; m = importlib.import_module('aotinfer_$arch'); \
print(glob.glob(os.path.join(os.path.dirname(m.__file__), '*.so'))[0])")
rm -rf /tmp/cubins && mkdir -p /tmp/cubins
(cd /tmp/cubins && cuobjdump -xelf all "$so" > /dev/null)
for c in /tmp/cubins/*.cubin; do
  if nvdisasm -gi -c "$c" > /tmp/cubins/dis.txt 2>/dev/null && grep -q "$pattern" /tmp/cubins/dis.txt; then
    echo "# cubin $(basename "$c")"
    cat /tmp/cubins/dis.txt
  fi
done | gzip > "$out/nvdisasm.txt.gz"
ls -la "$out"
python3 dev/sass_lines.py "$out/ncu-src.csv.gz" "$out/nvdisasm.txt.gz" 40 3
python3 -m pip install -q --no-deps --force-reinstall dist/aotinfer_"$arch"-*.whl  # default build again
