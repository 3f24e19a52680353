#!/usr/bin/env bash
# A prepared accelerator check, for a lent GPU (or Ascend NPU) machine whose python3 already holds torch with CUDA
# (or torch_npu): installs what else `diffpolicy bench device` imports from wheels carried there, then prints its
# one JSON — chunk latency p50/p99 (the DDIM-10 and the one-step policy, fp32 and bf16), BC iterations/s of the
# vision recipe (both stages), PPO env steps/s — each beside the same figure on that machine's CPU, and the
# speedups. Minutes on a GPU machine (the CPU reference is most of it).
#
#   scripts/device_check.sh --download DIR PYVER  # here: the wheels for the device's Python (e.g. 3.12) into DIR
#   scripts/device_check.sh [DIR]                 # there, with DIR carried along; QUICK=1: a few iterations only
#
# PYTHON (default python3) is the interpreter that holds the accelerator's torch; torch itself is never
# installed or replaced here.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# what the sim, the models and the trainers import besides torch (pinned as the README installs them)
NEEDED="mujoco gymnasium numpy tqdm tensorboard matplotlib pyyaml ninja"
requirements() {
  for name in $NEEDED; do grep -i "^${name}==" requirements/base.txt; done
}

if [ "${1:-}" = "--download" ]; then
  out=${2:?--download DIR PYVER}
  pyver=${3:?--download DIR PYVER}
  "$PYTHON" -m pip download --only-binary=:all: --python-version "$pyver" --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$out" $(requirements)
  du -sh "$out"
  exit 0
fi

if [ -n "${1:-}" ]; then  # the carried wheels, without an index and without touching torch
  "$PYTHON" -m pip install --quiet --no-index --find-links "$1" $(requirements)
fi
"$PYTHON" -c 'import torch; print(f"device_check: torch {torch.__version__}, cuda {torch.cuda.is_available()}", flush=True)' >&2

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "${QUICK:-0}" = 1 ]; then
  args=(--latency-iters 10 --bc-iters 8 --demo-episodes 3 --n-envs 2 --rollout-steps 4)
else
  args=()
fi
exec "$PYTHON" -m diffpolicy_ros.cli bench device --json "${args[@]}"
