#!/usr/bin/env bash
# Fresh machine to green: installs packages, builds, and runs every test: the unit, mpi, fault, lab and
# gpu labels, then the sanitizer stage (unit tests and the bad-input corpus under ASan+UBSan, the
# thread-backend tests under TSan, each fuzzer for a short while). Non-zero on any failure. A label whose tests all skipped (gpu without
# a device) is reported as skipped, never as passed; the closing lines list each stage's outcome.
#   scripts/test.sh              everything (what CI runs)
#   scripts/test.sh --sanitize   only the sanitizer stage
#   scripts/test.sh --quick      everything but the sanitizer stage
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
case "${1:-}" in
  "") ;;
  --sanitize) mode=sanitize ;;
  --quick) mode=quick ;;
  *) echo "usage: scripts/test.sh [--sanitize|--quick]" >&2; exit 1 ;;
esac
t_start=$SECONDS
t_stage=$SECONDS
# stage NAME: logs how long the stage since the previous call took (CI's 45-minute budget is watched
# from these lines).
stage() {
  echo "test: ${1} took $((SECONDS - t_stage)) s (total $((SECONDS - t_start)) s)"
  t_stage=$SECONDS
}
scripts/setup.sh
stage setup
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(pwd)
summary=()
passed_all=0
skipped_all=0

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
  passed_all=$((passed_all + ${total:-0} - skipped))
  skipped_all=$((skipped_all + skipped))
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

# sanitized BUILD_DIR FLAGS TARGET...: a CPU-only Debug build instrumented with FLAGS.
sanitized() {
  local dir=$1 flags=$2
  shift 2
  # Tests are listed when ctest runs (PRE_TEST), not by running each binary right after linking.
  # -g1: line tables only (what a sanitizer report needs), less to compile than -g.
  cmake -S "$root" -B "$dir" -DCIUIC_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null || return 1
  cmake --build "$dir" -j "$(nproc)" --target "$@" >/dev/null
}

# The sanitizer stage's two instrumented trees. ASan + UBSan (clang, with libFuzzer's coverage: the
# tree scripts/fuzz.sh fuzzes, configured the same way, with MPI): every unit test binary (the core,
# kernel, collective, gloo, bench, CLI, tuner, plugin-harness and database-writer tests, the C API's
# three), the MPI tests run under mpiexec, the two tools (for the bad-input corpus and the CLI tests)
# and the fuzz harnesses. -O1 and line tables only: reports keep
# file:line, and the build takes less of CI's time. TSan: every test binary that starts threads: the
# thread backend (ranks as threads) and every algorithm over it, the watchdog, heartbeats, progress
# line and trace recorder (test_core), gloo's transport under our calls (test_gloo), the runner's
# sweeps over rank-threads (test_bench).
sanitizer_builds() {
  local t0=$SECONDS
  cmake -S "$root" -B build-fuzz -DCIUIC_FUZZ=ON -DCIUIC_CUDA=OFF -DCIUIC_MPI=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST >/dev/null || return 1
  cmake --build build-fuzz -j "$(nproc)" --target test_core test_kernels test_collectives test_bench test_c_api \
    test_gloo test_tuner test_cli test_db_writers test_nccl_tuner test_compare test_nccl_flags test_c_codec_api \
    test_c_store_api test_mpi test_c_mpi ciuic-bench ciuic-tune state_load_driver sizes_fuzz profile_fuzz topology_fuzz workload_fuzz state_load_fuzz \
    codec_wire_fuzz codec_spec_fuzz run_json_fuzz baseline_fuzz published_fuzz sqlite_fuzz >/dev/null || return 1
  echo "test: asan build: $((SECONDS - t0)) s of its own"
  t0=$SECONDS
  sanitized build-tsan "-fsanitize=thread -fno-omit-frame-pointer" test_collectives test_core test_gloo test_bench || return 1
  echo "test: tsan build: $((SECONDS - t0)) s of its own"
}

san_pid=""
if [ "$mode" != sanitize ]; then
  scripts/build.sh
  stage build
  if [ "$mode" = all ]; then
    # The sanitizer builds run beside the labels at the lowest priority. The labels leave a core idle
    # for much of their time (the fault label about a third: its ranks wait out deadlines), which the
    # builds take; when the tests keep both cores busy a nice-19 build gets about 1.5% of them (CFS
    # weights 15 against 1024), so the tests' deadlines and timings stay theirs.
    mkdir -p build-fuzz
    # Its own session and process group (setsid), so a failing label ends the builds with it. With the
    # kernel's autogroups on (Debian's default) every session gets an equal share of the CPU whatever
    # its tasks' nice values, so the session's own autogroup is set to nice 19 too; and the builds end
    # themselves when this script is gone (a SIGKILL its EXIT trap never sees).
    setsid nice -n 19 bash -c "{ echo 19 >/proc/self/autogroup; } 2>/dev/null || true
      (while kill -0 $$ 2>/dev/null; do sleep 2; done; kill -- -\$\$ 2>/dev/null) &
      watcher=\$!
      $(declare -f sanitized sanitizer_builds); root='$root'
      rc=0; sanitizer_builds || rc=\$?
      kill \$watcher 2>/dev/null; exit \$rc" >build-fuzz/sanitizer-builds.log 2>&1 &
    san_pid=$!
    trap 'kill -- -$san_pid 2>/dev/null' EXIT
  fi
  cd build
  # The gpu label first and the unit label last: the last ctest summary in the log is the largest one,
  # never a label whose only test skipped.
  run_label gpu "no device"
  stage "gpu label"
  run_label fault "no MPI in this build"
  stage "fault label"
  run_label mpi "no MPI in this build"
  stage "mpi label"
  run_label lab "needs root and MPI"
  stage "lab label"
  run_label unit "nothing to run" -j "$(nproc)"
  stage "unit label"
  cd "$root"
fi

if [ "$mode" != quick ]; then
  if [ -n "$san_pid" ]; then
    wait "$san_pid" || { tail -n 40 build-fuzz/sanitizer-builds.log; echo "test: the sanitizer builds failed" >&2; exit 1; }
    trap - EXIT
  else
    mkdir -p build-fuzz
    sanitizer_builds >build-fuzz/sanitizer-builds.log 2>&1 || { tail -n 40 build-fuzz/sanitizer-builds.log; echo "test: the sanitizer builds failed" >&2; exit 1; }
  fi
  grep '^test: ' build-fuzz/sanitizer-builds.log
  stage "sanitizer builds (the rest of)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  # The runner's every-collective sweep at 2 and 3 rank-threads (its 1 and 8 run in the unit label):
  # under ASan the 8-thread sweep alone took 2.5 minutes of CI's 30.
  for t in test_core test_kernels test_collectives test_bench; do
    CIUIC_TEST_RANKS=2,3 build-fuzz/tests/$t --gtest_brief=1 >"build-fuzz/$t.log" 2>&1 || { tail -n 40 "build-fuzz/$t.log"; echo "test: asan $t failed" >&2; exit 1; }
  done
  (cd build-fuzz/tests && ./test_c_api >../test_c_api.log 2>&1) || { tail -n 40 build-fuzz/test_c_api.log; echo "test: asan test_c_api failed" >&2; exit 1; }
  asan_run() {  # LOG COMMAND...: run in build-fuzz/tests, the log's tail and exit 1 on a failure
    local log=$1
    shift
    (cd build-fuzz/tests && "$@" >"../$log.log" 2>&1) || { tail -n 40 "build-fuzz/$log.log"; echo "test: asan $log failed" >&2; exit 1; }
  }
  # The rest of the unit binaries. Cut for time, instrumented: gloo's rank-parameterised tests run at
  # 2 ranks; test_tuner runs every test (66 of 79, about 50 s) but the 13 that train the accuracy gate
  # or run whole studies or searches at length (Gate.*, six Study tests, a resumed study, Bayes against
  # the grid, the CLI's default study: 20 minutes instrumented, Resume's alone 8); the database writers
  # store 100 runs each.
  asan_run test_gloo ./test_gloo --gtest_brief=1 '--gtest_filter=-*/1:*/2'
  tuner_cut=Gate.*:Resume.AnInterruptedCpuLocalStudyResumes
  tuner_cut+=:Search.BayesAndCoordinateDescentReachTheGridOptimumWithFivePercentOfItsEvaluations
  tuner_cut+=:TuneCli.DefaultsLiveInTheDataFolderAndOutDashIsStdout:Study.CalibrateStoresKernelCurvesPerSizeAndAStudyWithoutALinkSaysSo
  tuner_cut+=:Study.AccumulationIsPricedGatedAndSuggestedOnlyWhereTheGatePassed:Study.WritesProfileAndTrialsAndResumesAnInterruptedStudy
  tuner_cut+=:Study.AGpuCalibrationDrivesTheCodecCostsOfItsTopology:Study.AClusterTopologyTakesItsLinksFromACalibrationUnderItsLauncher
  tuner_cut+=:Study.AThreeLevelTopologyGetsADepthThreeRuleThatTheRuntimeRunsAtDepthThree
  # The accuracy gate's verdicts come from the uninstrumented build's tests (tests/tuner/gate_cache.h;
  # the same sources): computed instrumented they took 9 of test_tuner's 10 minutes.
  tuner_cache=$(ls -t build/tests/gate_cache-*.db 2>/dev/null | head -n 1 || true)
  rm -f build-fuzz/gate_cache.db
  [ -n "$tuner_cache" ] && cp "$tuner_cache" build-fuzz/gate_cache.db
  CIUIC_TEST_GATE_CACHE=$root/build-fuzz/gate_cache.db asan_run test_tuner ./test_tuner --gtest_brief=1 \
    "--gtest_filter=-$tuner_cut"
  asan_run test_cli ./test_cli --gtest_brief=1 '--gtest_filter=-CliMpi*'
  asan_run test_db_writers env CIUIC_DB_WRITERS_RUNS=100 ./test_db_writers --gtest_brief=1
  for t in test_compare test_nccl_flags test_c_codec_api test_c_store_api; do asan_run "$t" "./$t"; done
  # Leak checking off where the allocations' module is unloaded before LSan looks (it can neither name
  # nor suppress them): the NCCL plugin links libstdc++ statically, whose emergency exception pool
  # (72,704 bytes per load) is never freed, and the harness unloads it 13 times; Open MPI frees
  # neither its own nor its dlclosed components' start-up allocations. Memory errors and UB stay checked.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 asan_run test_nccl_tuner ./test_nccl_tuner --gtest_brief=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 asan_run test_mpi mpiexec -n 2 --oversubscribe ./test_mpi --gtest_brief=1
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 asan_run test_c_mpi mpiexec -n 2 --oversubscribe ./test_c_mpi
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 asan_run test_cli_mpi ./test_cli --gtest_brief=1 '--gtest_filter=CliMpi*'
  # The bad-input corpus (1023 cases) through the instrumented tools. Its workload control runs a
  # small study, whose accuracy gate instrumented takes minutes: it starts from the verdicts of an
  # uninstrumented run (the same gate options), where build/ has one.
  gate_dir=$(mktemp -d)
  if [ -x build/bin/ciuic-tune ]; then
    build/bin/ciuic-tune run --topology dgx_a100 --workload resnet50 --strategy random --budget 2 --gate-seeds 1 \
      --db "$gate_dir/gate.db" --out "$gate_dir/gate.json" >"$gate_dir/gate.log" 2>&1 || true
  fi
  gate_db=""
  [ -s "$gate_dir/gate.db" ] && gate_db="$gate_dir/gate.db"
  BAD_INPUTS_GATE_DB="$gate_db" BAD_INPUTS_CONTROL_TIMEOUT=600 tests/scripts/bad_inputs.sh build-fuzz/bin/ciuic-bench \
    build-fuzz/bin/ciuic-tune build-fuzz/tests/state_load_driver tests/data/bad >build-fuzz/bad_inputs.log 2>&1 ||
    { tail -n 40 build-fuzz/bad_inputs.log; rm -rf "$gate_dir"; echo "test: asan bad-input corpus failed" >&2; exit 1; }
  rm -rf "$gate_dir"
  summary+=("asan+ubsan: every unit test binary (test_gloo at 2 ranks, test_tuner without its 13 longest studies and gate trainings), test_mpi and test_c_mpi under mpiexec, the bad-input corpus clean")
  stage "asan tests"
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # Suppressions: only uninstrumented libraries, each entry with its reason (tests/sanitizers/tsan.supp).
  # What is cut for time: gloo's rank-parameterised tests run at 2 ranks (at 3 and 4 they took 135 of
  # test_gloo's 237 s), the runner's every-collective sweep at 3 rank-threads, and the state file's
  # random-kill saves (forked savers killed mid-write, 114 of test_collectives' 197 s under TSan; they
  # test durability, not threads, and run in the unit label and under ASan).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp"
  tsan_run() {  # BINARY [ARG...]
    CIUIC_TEST_RANKS=3 "build-tsan/tests/$1" "${@:2}" --gtest_brief=1 >"build-tsan/$1.log" 2>&1 ||
      { tail -n 60 "build-tsan/$1.log"; echo "test: tsan $1 failed" >&2; exit 1; }
  }
  tsan_run test_collectives '--gtest_filter=-RuntimeState.ASaveKilledAtAnyMomentLeavesTheOldOrTheNewFile'
  tsan_run test_core
  tsan_run test_gloo '--gtest_filter=-*/1:*/2'
  tsan_run test_bench
  unset TSAN_OPTIONS
  summary+=("tsan: test_collectives test_core test_gloo test_bench clean")
  stage "tsan tests"
  # Each fuzzer for a short while from its seed corpus (scripts/fuzz.sh SECONDS for longer runs).
  scripts/fuzz.sh "${CIUIC_FUZZ_SECONDS:-10}"
  summary+=("fuzz: 11 harnesses x ${CIUIC_FUZZ_SECONDS:-10} s, no finding")
  stage "fuzz"
fi
summary+=("time: $((SECONDS - t_start)) s")
printf 'test: %s\n' "${summary[@]}"
# The closing line: every ctest test that ran, over all labels (a failure exited above).
echo "ciuic: ${passed_all} passed, 0 failed, ${skipped_all} skipped"
