#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds strata (release preset) and runs the main job.
# Until the training engine lands, the main job is `strata info`. Extra arguments are passed
# to `strata` instead (e.g. ./run.sh config my.json).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target strata
if [[ $# -eq 0 ]]; then
  exec ./build/release/tools/strata info
fi
exec ./build/release/tools/strata "$@"
