#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds strata (release preset) and runs the main job:
# `strata train` of the embedded default (configs/default_train.json): a 32M-parameter byte-level
# GPT (preset bytes-30m) whose model states (~640 MB: fp32 parameters, gradients, master weights
# and Adam moments) are 10x the 64 MiB device budget, with ZeRO stage 3, parameters on pinned
# host memory and optimizer states on NVMe (a scratch folder under build/run/swap), trained on
# this repository's own documentation (text every checkout has), with a checkpoint every 10
# steps in build/run/checkpoints (resume: add --resume build/run/checkpoints and a larger
# --steps). On a machine with a GPU the same command uses the GPU (strata.device "auto").
# Extra arguments are passed to `strata` instead (e.g. ./run.sh config my.json).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target strata
strata=./build/release/tools/strata
if [[ $# -gt 0 ]]; then
  exec "$strata" "$@"
fi
mkdir -p build/run/swap
rm -rf build/run/checkpoints  # this job's own output from an earlier ./run.sh (a new run refuses another's)
cat README.md docs/*.md > build/run/corpus.txt
exec "$strata" train --config configs/default_train.json --preset bytes-30m \
  --text build/run/corpus.txt --steps ${STRATA_RUN_STEPS:-30} --seq-len 128 --activation-checkpointing \
  --trace build/run/trace.json --metrics build/run/metrics.jsonl --save build/run/weights.safetensors \
  --checkpoint-dir build/run/checkpoints --checkpoint-every 10
