#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan, CUDA off; scripts/fuzz_tree.sh) into build-fuzz/ and runs
# each for SECONDS (default 60) from its seeds in fuzz/corpus/<name>/ and the project's files of that
# kind: the shipped profiles, topologies and workloads, tests/data's results and profiles, and the
# bad-input corpus's files for that reader in tests/data/bad/ (folders are read as they are, single
# files copied into a temporary seed folder; new inputs go to a temporary folder; the committed seeds
# are never modified). A crash, leak, sanitizer report or
# uncaught non-ciuic exception is a finding: its input is kept in build-fuzz/findings/ and the script
# exits 1. Prints per harness: executions, seconds, corpus size, verdict.
# Usage: scripts/fuzz.sh [SECONDS] [HARNESS...]   (harnesses: sizes profile topology workload state_load
#   codec_wire codec_spec run_json baseline published sqlite crossover)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(sizes profile topology workload state_load codec_wire codec_spec run_json baseline
  published sqlite crossover)
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 1; }
# The tree scripts/test.sh's sanitizer stage builds its ASan + UBSan tests in too (scripts/fuzz_tree.sh:
# one instrumented build for both). CIUIC_FUZZ_BUILT=1: the harnesses are built already (test.sh runs
# several of these at once, which must not build the same tree together).
targets=()
for h in "${harnesses[@]}"; do targets+=("${h}_fuzz"); done
if [ "${CIUIC_FUZZ_BUILT:-0}" != 1 ]; then
  scripts/fuzz_tree.sh
  cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}" >/dev/null
fi
mkdir -p build-fuzz/findings
failed=0
printf '%-11s %10s %7s %7s %s\n' harness execs seconds corpus verdict
for h in "${harnesses[@]}"; do
  work=$(mktemp -d)
  log="$work/log"
  rc=0
  # Seeds: fuzz/corpus/<name>/, plus the files the project already keeps of that kind (folders, or
  # files: the shipped profiles sit beside other files, the topologies beside a README).
  seeds=("fuzz/corpus/$h")
  # tests/data/bad/json holds what every JSON reader refuses alike (nesting beyond the limit).
  case $h in
    profile) seeds+=(profiles/*.profile.json tests/data/profiles tests/data/bad/profile tests/data/bad/json) ;;
    topology) seeds+=(profiles/topologies/*.json tests/data/bad/topology tests/data/bad/json) ;;
    workload) seeds+=(profiles/workloads tests/data/bad/workload tests/data/bad/json) ;;
    state_load) seeds+=(tests/data/bad/state) ;;
    crossover) seeds+=(tests/data/bad/crossover tests/data/bad/json) ;;
    run_json) seeds+=(tests/data/results tests/data/bad/json) ;;
    baseline) seeds+=(profiles/baselines tests/data/bad/json) ;;
    published) seeds+=(profiles/published tests/data/bad/published tests/data/bad/json) ;;
    sqlite) seeds+=(tests/data/bad/db tests/data/results) ;;
  esac
  # libFuzzer runs a file named on its command line once instead of fuzzing: single files go into a
  # seed folder of this run (removed with it; read, never written).
  files="$work.seeds"
  mkdir -p "$files"
  # The text parsers also start from every value the bad-input corpus gives their options (quotes
  # dropped): --sizes for sizes, --codec and --algo for codec_spec.
  case $h in
    sizes) opts='--sizes' ;;
    codec_spec) opts='--codec|--algo' ;;
    *) opts='' ;;
  esac
  if [ -n "$opts" ]; then
    grep -oE -- "($opts)[ =][^ ]*" tests/data/bad/cases.tsv | sed -E "s/^($opts)[ =]//; s/^['\"\$]+//; s/['\"]+\$//" |
      sort -u | awk -v d="$files" '{ f = sprintf("%s/tsv-%04d", d, NR); printf "%s", $0 > f; close(f) }'
  fi
  seed_paths=()
  for d in "${seeds[@]}"; do
    if [ -d "$d" ]; then
      seed_paths+=("$PWD/$d")
    elif [ -f "$d" ]; then
      cp "$d" "$files/$(echo "$d" | tr / _)"
    fi
  done
  [ -z "$(ls -A "$files")" ] || seed_paths+=("$files")
  (cd "$work" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$OLDPWD/build-fuzz/fuzz/${h}_fuzz" -max_total_time="$secs" \
     -print_final_stats=1 -timeout=10 -rss_limit_mb=4096 "$work" "${seed_paths[@]}" >"$log" 2>&1) || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  corpus=$(find "$work" -maxdepth 1 -type f ! -name log ! -name 'crash-*' ! -name 'leak-*' ! -name 'timeout-*' ! -name 'oom-*' | wc -l)
  verdict="no finding"
  if [ "$rc" -ne 0 ]; then
    verdict="FINDING (exit $rc): see build-fuzz/findings/$h-*"
    failed=1
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [ -e "$f" ] && cp "$f" "build-fuzz/findings/$h-$(basename "$f")"
    done
    cp "$log" "build-fuzz/findings/$h.log"
    grep -m 3 -E "ERROR|runtime error|terminate called|what\(\)" "$log" | sed 's/^/    /' || true
  fi
  printf '%-11s %10s %7s %7s %s\n' "$h" "${execs:-?}" "$secs" "$corpus" "$verdict"
  rm -rf "$work" "$files"
done
exit "$failed"
