#!/usr/bin/env bash
# Prints a digest of the sources one provider wheel is built from (the root CMakeLists.txt,
# cmake/, providers/csrc/ and providers/<arch>/, less build outputs), so that a wheel built
# here and carried to the GPU machine can be checked against the tree it travels with
# (ci/prebuild.sh writes it beside the wheel; ci/gpu-test.sh PREBUILT=1 compares). Paths are
# relative to the repository root, so the same tree gives the same digest on both machines.
#   ci/provider-digest.sh sm90a
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: ci/provider-digest.sh <arch>}
[ -d "providers/$arch" ] || { echo "provider-digest: no providers/$arch" >&2; exit 2; }
find CMakeLists.txt cmake providers/csrc "providers/$arch" -type f \
  -not -path "*/build/*" -not -path "*/__pycache__/*" -not -path "*.egg-info/*" \
  -not -name "*.so" -not -name "*.pyc" -not -name source_revision.txt -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
