#!/usr/bin/env bash
# One device call for the labs a session left prepared (a lab tool, GPU machine): each lab's
# wheel builds beside ci/device-lab.sh's build and GPU suite (dev/build_beside.sh), then, lab by
# lab, an A/B against the default wheel (dev/ab_wheels.sh with dev/time_sampling_graph.py at 1
# and 16 rows; $OUT/ab-NAME.txt, which also says whether both drew the same tokens) and the
# sampling tests under the lab's wheel ($OUT/lab-N.txt); the default wheel is reinstalled after
# each. Each argument is NAME=MACRO[:OPS], OPS the ops to time, comma-separated (default: all);
# LAB_BATCHES the batch sizes to time (default "1 16"); LAB_DISTS the row kinds
# (dev/time_sampling_graph.py; default "flat peaked"); LAB_TESTS the GPU tests run under each
# lab's wheel (default tests/gpu/test_sampling.py). LAB_BEFORE: a command to run after the
# GPU suite and before the labs, once every lab's build is done (so that no build shares the
# host with it), e.g. "python3 benchmarks/bench_sampling.py": the record and the labs in one
# machine start (~450 s for one lab).
#   dev/lab_round.sh fewer=AOTINFER_LAB_FEWER_BARRIERS:top_k,joint,top_p \
#                    warp=AOTINFER_LAB_JOINT_WARP:joint,top_k_first,top_k
set -uo pipefail
cd "$(dirname "$0")/.."
arch=$(ci/provider-arch.sh)
builds=() cmds=()
for spec in "$@"; do
  name=${spec%%=*} rest=${spec#*=}
  macro=${rest%%:*} ops=""
  [ "$rest" != "$macro" ] && ops=${rest#*:}
  only=""
  [ -n "$ops" ] && only="LAB_OPS='${ops//,/ }' "
  [ -n "${LAB_DISTS:-}" ] && only+="LAB_DISTS='$LAB_DISTS' "
  builds+=("$name=.:-DCMAKE_CUDA_FLAGS=-D$macro")
  cmds+=("WAIT_FOR=/tmp/$name-wheel.done LABEL_A=default LABEL_B=$name AB_NAME=ab-$name \
${only}dev/ab_wheels.sh - /tmp/$name-wheel dev/time_sampling_graph.py ${LAB_BATCHES:-1 16} \
&& python3 -m pytest ${LAB_TESTS:-tests/gpu/test_sampling.py} -m gpu -q -p no:cacheprovider | tail -3; \
python3 -m pip install -q --no-deps --force-reinstall dist/aotinfer_$arch-*.whl")
done
if [ -n "${LAB_BEFORE:-}" ]; then
  waits=""
  for spec in "$@"; do
    waits+="for _ in \$(seq 600); do [ -f /tmp/${spec%%=*}-wheel.done ] && break; sleep 1; done; "
  done
  cmds=("$waits$LAB_BEFORE" "${cmds[@]}")
fi
dev/build_beside.sh "${builds[@]}" &
ci/device-lab.sh "${cmds[@]}"
rc=$?
wait
for spec in "$@"; do tail -n 1 "/tmp/${spec%%=*}-build.log"; done
exit $rc
