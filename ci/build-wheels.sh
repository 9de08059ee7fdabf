#!/usr/bin/env bash
# Builds the aotinfer wheels: the pure-Python core plus the named providers.
#
#   ci/build-wheels.sh               core + all six providers
#   ci/build-wheels.sh sm90a sm120f  core + those providers
#
# Wheels go to dist/ at the repository root (AOTINFER_WHEEL_DIR overrides it, e.g. for a
# test's temporary wheelhouse). Each distribution is built with the standard
# `python -m build --wheel`, so:
#   - by default in an isolated build environment (build requirements are installed from
#     the configured package index, as for any PEP 517 build);
#   - AOTINFER_BUILD_ISOLATION=0 adds --no-isolation: offline builds with the
#     scikit-build-core, pybind11, cmake and setuptools already installed (distro/conda
#     style, and what the CI and the packaging test use);
#   - CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL, CUDACXX, SOURCE_DATE_EPOCH and the rest of
#     the environment pass through untouched to scikit-build-core and CMake.
# PYTHON picks the interpreter (default: python on PATH).
# scikit-build-core keeps each provider's CMake build in providers/<arch>/build/ so that a
# rebuild is incremental; delete that folder for a clean build. Its CMake cache also keeps
# every -D of an earlier CMAKE_ARGS (CMAKE_CUDA_FLAGS of a lab build stays in force in the
# next build that does not set it), so delete it after building with other CMAKE_ARGS.
set -euo pipefail

PROVIDERS=(sm75 sm80 sm90a sm100a sm110a sm120f)  # same table as cmake/arches.cmake
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${AOTINFER_WHEEL_DIR:-$ROOT/dist}"
PYTHON="${PYTHON:-python3}"  # (a fresh Debian/Ubuntu has no `python`)

usage() {
  echo "usage: $0 [arch ...]   (arch: ${PROVIDERS[*]}; default: all)" >&2
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  usage
  exit 0
fi

archs=("$@")
((${#archs[@]})) || archs=("${PROVIDERS[@]}")
for arch in "${archs[@]}"; do
  if [[ " ${PROVIDERS[*]} " != *" $arch "* ]]; then
    echo "error: unknown provider '$arch'; valid names: ${PROVIDERS[*]}" >&2
    usage
    exit 2
  fi
done

build_args=(--wheel)
case "${AOTINFER_BUILD_ISOLATION:-1}" in
  0 | false | no | off) build_args+=(--no-isolation) ;;
esac

mkdir -p "$OUT"
# Each build writes into its own empty folder, so exactly the wheel it made is reported
# (dist/ may hold older wheels) and then moved into $OUT.
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

built=()
build_one() {  # build_one <source dir>
  local src="$1" whl
  echo "==> building $src" >&2
  rm -rf "${stage:?}"/*
  "$PYTHON" -m build "${build_args[@]}" --outdir "$stage" "$ROOT/$src" >&2
  for whl in "$stage"/*.whl; do
    mv -f "$whl" "$OUT/"
    built+=("$OUT/$(basename "$whl")")
  done
}

build_one core
for arch in "${archs[@]}"; do
  build_one "providers/$arch"
done

echo "built into $OUT:"
for whl in "${built[@]}"; do
  printf '  %-60s %8.2f MB\n' "$(basename "$whl")" "$(stat -c %s "$whl")e-6"
done
