#!/usr/bin/env bash
# The wheels a lab comparison installs in turn (a lab tool, GPU machine): DIR/BASE holds the
# default wheel ci/gpu-test.sh left in dist/, and DIR/<name> a wheel built with
# -DCMAKE_CUDA_FLAGS=-D<name> for each lab macro named (the tree holds every lab's code
# behind its macro). Used by dev/ab_provider_labs.sh and dev/ncu_labs.sh.
#   dev/build_lab_wheels.sh DIR BASE LAB...
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
base=$2
shift 2
arch=$(ci/provider-arch.sh)
rm -rf "$dir"
mkdir -p "$dir/$base"
cp dist/aotinfer_"$arch"-*.whl "$dir/$base/"
for lab in "$@"; do
  mkdir -p "$dir/$lab"
  rm -rf "providers/$arch/build"
  CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-D$lab" python3 -m pip wheel -q --no-build-isolation --no-deps \
    "providers/$arch" -w "$dir/$lab"
done
