#!/usr/bin/env bash
# Builds provider wheels beside the GPU suite (a lab tool, GPU machine): the builds are CPU
# work, so started in the background before ci/device-lab.sh they overlap its build and
# tests. Each argument is NAME=SOURCE_ROOT[:CMAKE_ARGS]; the wheel lands in /tmp/NAME-wheel
# (its build folder /tmp/NAME-build, so trees shared with the main build do not collide)
# and /tmp/NAME-wheel.done marks it finished (dev/ab_wheels.sh, dev/ncu_lines.sh wait on it).
#   dev/build_beside.sh old=.lab-old lineinfo=.:-DCMAKE_CUDA_FLAGS=-lineinfo &
set -uo pipefail
cd "$(dirname "$0")/.."
arch=$(ci/provider-arch.sh)
for spec in "$@"; do
  name=${spec%%=*} rest=${spec#*=}
  root=${rest%%:*} args=""
  [ "$rest" != "$root" ] && args=${rest#*:}
  (
    rm -rf "/tmp/$name-wheel" "/tmp/$name-build" && mkdir -p "/tmp/$name-wheel"
    CMAKE_BUILD_PARALLEL_LEVEL=8 CMAKE_ARGS="$args" python3 -m pip wheel -q --no-build-isolation --no-deps \
      --config-settings=build-dir="/tmp/$name-build" "$root/providers/$arch" -w "/tmp/$name-wheel" \
      > "/tmp/$name-build.log" 2>&1
    echo "build $name: rc $?" >> "/tmp/$name-build.log"
    touch "/tmp/$name-wheel.done"
  ) &
done
wait
