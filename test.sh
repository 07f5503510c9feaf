#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds strata and runs every test through ctest:
#   1. release preset: every test (unit, concurrency, mpi; cuda tests skip without a GPU; the
#      Python package's extension and its pytest suite, label python: docs/python.md);
#   2. asan preset (ASan + UBSan, -O1 -g1): builds and runs the unit tests;
#   3. tsan preset (clang + its OpenMP runtime): builds and runs the concurrency tests;
#   4. fuzz preset (clang, libFuzzer + ASan + UBSan): builds only the parser fuzz targets
#      (tests/fuzz) and runs each for 30 s (-DSTRATA_FUZZ_SECONDS) from its seed corpus; a crash,
#      sanitizer report, leak, hang or stray exception fails it.
# STRATA_TEST_PRESETS="release" (space-separated) runs a subset.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh

presets=${STRATA_TEST_PRESETS:-"release asan tsan fuzz"}
jobs=$(nproc)
# ccache (CMakeLists.txt uses it when found) holds four presets with CUDA: more than its 5 GB default.
# A fresh clone elsewhere hits the cache of an earlier one: paths relative to the clone
# (CCACHE_BASEDIR), and the build folder not hashed into the debug builds (asan, tsan, fuzz: their
# debug info may then name the earlier clone's folder, which only a debugger would notice).
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
summary=()
status=0
total_passed=0
total_failed=0
total_skipped=0
for preset in $presets; do
  echo "=== $preset: configure and build"
  log="build-$preset.configure.log"
  cmake --preset "$preset" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; exit 1; }
  rm -f "$log"
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: test"
  runner=()
  # TSan keeps its shadow memory at fixed addresses; no ASLR keeps mappings out of its way.
  [[ $preset == tsan ]] && runner=(setarch "$(uname -m)" -R)
  ctest_log="build/$preset/ctest.log"
  if ! "${runner[@]}" ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$ctest_log"; then
    status=1
  fi
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$ctest_log" | tail -1)
  if [[ -z $line ]]; then
    summary+=("$preset: no ctest summary (see $ctest_log)")
    status=1
    continue
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* tests failed out of ([0-9]+).*/\1/' <<<"$line")
  skipped=$(grep -c '(Skipped)' "$ctest_log" || true)
  total_failed=$((total_failed + failed))
  total_skipped=$((total_skipped + skipped))
  total_passed=$((total_passed + total - failed - skipped))
  summary+=("$preset: $line ($skipped skipped)")
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "tests: $total_passed passed, $total_failed failed, $total_skipped skipped"
exit $status
