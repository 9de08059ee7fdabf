#!/usr/bin/env bash
# Builds one provider wheel here for the GPU machine's Python (3.12; the device tool's), so
# that a device call installs it (ci/gpu-test.sh PREBUILT=1) instead of spending ~2 minutes
# of scarce GPU time on the build; writes the sources' digest beside it
# (dist/aotinfer_<arch>.digest, ci/provider-digest.sh), which gpu-test.sh checks. gpu-test.sh
# builds through it too where it has no matching wheel.
#   ci/prebuild.sh [arch]            (default sm90a; PYTHON names the target machine's Python,
#                                     3.12 for the device tool's)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm90a}
PY=${PYTHON:-python3.12}
command -v "$PY" >/dev/null || { echo "prebuild: $PY not found (set PYTHON to a Python 3.12)" >&2; exit 2; }
mkdir -p dist
rm -f dist/aotinfer_"$arch"-*.whl dist/aotinfer_"$arch".digest
digest=$(ci/provider-digest.sh "$arch")
# The digest names sources only, so the stamped wheel is the default build: lab flags go
# through dev/build_lab_wheels.sh, never through a stamped wheel.
unset CMAKE_ARGS
"$PY" -m pip wheel -q --no-build-isolation --no-deps "providers/$arch" -w dist
# Taken before the build and again after it: a source edited meanwhile leaves no stamp.
[ "$(ci/provider-digest.sh "$arch")" = "$digest" ] || { echo "prebuild: sources changed during the build" >&2; exit 1; }
echo "$digest" > dist/aotinfer_"$arch".digest
echo "built $(ls dist/aotinfer_"$arch"-*.whl) from sources $digest"
