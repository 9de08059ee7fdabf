#!/usr/bin/env bash
# One device call for the cluster softmax's form lab (AOTINFER_LAB_SOFTMAX_ONE_WAVE, run-time
# AOTINFER_LAB_SOFTMAX_FORM; a lab tool, GPU machine): builds the provider with the lab macro
# (ci/device-lab.sh, its softmax tests under the plain form), runs the softmax tests under the
# "regs" form, then dev/sweep_softmax.py over grids of 384-4096 CTAs, each shape under the
# plain form, regs and carveout in turn in one process ($OUT/sweep-forms.json and the printed
# table; one process to fit a short device budget: two processes agreed within 0.2 us at every
# shape of history/ab-softmax-one-wave-74dc56e-h100.txt).
#   dev/lab_softmax_forms.sh
set -uo pipefail
cd "$(dirname "$0")/.."
shapes=192x32000,256x32000,288x32000,320x32000,352x32000,384x32000,416x32000,448x32000,512x32000
shapes+=,640x32000,1024x32000,64x128256,80x128256,96x128256,112x128256,128x128256,192x128256
shapes+=,256x128256,512x128256
tests="python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_softmax.py"
CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DAOTINFER_LAB_SOFTMAX_ONE_WAVE" GPU_TESTS=tests/gpu/test_softmax.py \
  exec ci/device-lab.sh \
  "AOTINFER_LAB_SOFTMAX_FORM=regs $tests | tail -n 3" \
  "SWEEP_SHAPES=$shapes python3 dev/sweep_softmax.py \$OUT/sweep-forms.json auto regs carveout"
