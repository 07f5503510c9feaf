#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds strata and runs every test through ctest:
#   1. release preset: every test (unit, concurrency, mpi; cuda tests skip without a GPU);
#   2. asan preset (ASan + UBSan): the unit tests;
#   3. tsan preset (clang + its OpenMP runtime): the concurrency tests.
# STRATA_TEST_PRESETS="release" (space-separated) runs a subset.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh

presets=${STRATA_TEST_PRESETS:-"release asan tsan"}
jobs=$(nproc)
summary=()
status=0
for preset in $presets; do
  echo "=== $preset: configure and build"
  cmake --preset "$preset" >"build-$preset.configure.log" 2>&1 || {
    cat "build-$preset.configure.log"; exit 1; }
  rm -f "build-$preset.configure.log"
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: test"
  runner=()
  # TSan needs the fixed memory layout that ASLR with many random bits breaks (clang 14).
  [[ $preset == tsan ]] && runner=(setarch "$(uname -m)" -R)
  if "${runner[@]}" ctest --preset "$preset" -j "$jobs" 2>&1 | tee "build/$preset/ctest.log"; then
    summary+=("$preset: $(grep -E 'tests passed|tests failed' "build/$preset/ctest.log" | tail -1)")
  else
    summary+=("$preset: FAILED ($(grep -E 'tests passed|tests failed' "build/$preset/ctest.log" | tail -1))")
    status=1
  fi
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $status
