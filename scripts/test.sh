#!/usr/bin/env bash
# Fresh machine to green: installs packages, builds, and runs every test (unit, mpi, gpu). Non-zero on
# any failure. A label whose tests all skipped (gpu without a device) is reported as skipped, never as
# passed; the closing line lists each label's outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd build

summary=()
# run_label LABEL WHY-SKIPPED [ctest args...]: runs one label, records "label: N passed, K skipped".
run_label() {
  local label=$1 why=$2
  shift 2
  local log
  log=$(mktemp)
  local rc=0
  ctest -L "^${label}\$" --output-on-failure "$@" 2>&1 | tee "$log" || rc=$?
  local total skipped
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
  skipped=$(grep -c '(Skipped)$' "$log" || true)
  rm -f "$log"
  if [ "$rc" -ne 0 ]; then
    echo "test: ${label} failed" >&2
    exit 1
  fi
  if [ -z "$total" ] || [ "$total" -eq 0 ]; then
    summary+=("${label}: no tests")
  elif [ "$skipped" -eq "$total" ]; then
    summary+=("${label}: skipped (${why})")
  elif [ "$skipped" -gt 0 ]; then
    summary+=("${label}: $((total - skipped)) passed, ${skipped} skipped")
  else
    summary+=("${label}: ${total} passed")
  fi
}

run_label unit "nothing to run" -j "$(nproc)"
run_label mpi "no MPI in this build"
run_label gpu "no device"
printf 'test: %s\n' "${summary[@]}"
