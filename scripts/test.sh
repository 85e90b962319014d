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
  # -g1: line tables only (what a sanitizer report needs), less to compile than -g. A unity build, as
  # in build-fuzz/ (scripts/fuzz_tree.sh).
  cmake -S "$root" -B "$dir" -DCIUIC_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DCIUIC_TEST_COMPILE_OPTIONS= >/dev/null || return 1
  cmake --build "$dir" -j "$(nproc)" --target "$@" >/dev/null
}

# The sanitizer stage's two instrumented trees. ASan + UBSan (clang, with libFuzzer's coverage: the
# tree scripts/fuzz.sh fuzzes, configured the same way, with MPI): every unit test binary (the core,
# kernel, collective, gloo, bench, CLI, tuner, plugin-harness and database-writer tests, the C API's
# three), the MPI tests run under mpiexec, the two tools (for the bad-input corpus and the CLI tests)
# and the fuzz harnesses. -O1 and line tables only: reports keep file:line, and the build takes less of
# CI's time. The test sources without libFuzzer's coverage (CIUIC_TEST_COMPILE_OPTIONS; nothing fuzzes
# them). Both trees are unity builds: the instrumented JSON, fmt and standard-library code every source
# instantiates is compiled once per batch of sources (build-fuzz/ alone: 800 s of user time against
# 1003 s one source at a time; in a clean-clone run the builds' rest after the labels took 324 s against
# 580 s). Not -O0: it halves the tests' compile time, but their own loops (reference sums, damaged
# files) then ran the jobs about 130 s longer than it saved.
# TSan: every test binary that starts threads: the thread backend (ranks as threads) and every
# algorithm over it, the watchdog, heartbeats and trace recorder (test_core), the progress line's
# ticker while threads print (test_progress), gloo's transport under our calls (test_gloo), the
# runner's sweeps over rank-threads (test_bench), three rank-threads through the C API's store-made
# communicators and asynchronous allreduces (test_c_store_api), the accuracy gate training on rank-threads
# (test_tuner). Not the NCCL plugin's harness: the
# plugin wraps glibc's symbols to keep its floor (plugins/nccl_tuner/glibc_floor.cc) and links
# libstdc++ statically, and under TSan's interceptors its wrapped stat() crashes in TSan's runtime.
sanitizer_builds() {
  local t0=$SECONDS
  "$root/scripts/fuzz_tree.sh" || return 1
  cmake --build build-fuzz -j "$(nproc)" --target test_core test_progress test_kernels test_collectives test_bench test_c_api \
    test_gloo test_tuner test_cli test_db_writers test_nccl_tuner test_compare test_nccl_flags test_c_codec_api \
    test_c_store_api test_mpi test_c_mpi ciuic-bench ciuic-tune state_load_driver save_order_driver io_order_shim sizes_fuzz profile_fuzz topology_fuzz workload_fuzz state_load_fuzz \
    codec_wire_fuzz codec_spec_fuzz run_json_fuzz baseline_fuzz published_fuzz sqlite_fuzz crossover_fuzz >/dev/null || return 1
  echo "test: asan build: $((SECONDS - t0)) s of its own"
  t0=$SECONDS
  sanitized build-tsan "-fsanitize=thread -fno-omit-frame-pointer" test_collectives test_core test_progress test_gloo \
    test_bench test_c_store_api test_tuner || return 1
  echo "test: tsan build: $((SECONDS - t0)) s of its own"
}

# The sanitizer stage's jobs, longest first (names for san_job).
san_jobs() {
  printf '%s\n' asan-collectives asan-bench tsan-collectives asan-bad-inputs tsan-bench asan-tuner asan-gloo \
    tsan-gloo asan-mpi asan-db-writers asan-cli asan-core tsan-core asan-kernels asan-small tsan-tuner tsan-progress \
    tsan-c_store_api
  local h
  for h in sizes profile topology workload state_load codec_wire codec_spec run_json baseline published sqlite crossover; do
    echo "fuzz-$h"
  done
}

# san_job NAME: one job of the sanitizer stage (run by xargs from the project root; the SAN_* variables
# come from the stage). Writes build-fuzz/jobs/NAME.log, NAME.times and NAME.ok or NAME.failed.
san_job() {
  local name=$1 t0=$SECONDS rc=0
  local log="$SAN_ROOT/build-fuzz/jobs/$name.log"
  cd "$SAN_ROOT" || return 1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  # Leak checking off where the allocations' module is unloaded before LSan looks (it can neither name
  # nor suppress them): the NCCL plugin links libstdc++ statically, whose emergency exception pool
  # (72,704 bytes per load) is never freed, and the harness unloads it 13 times; Open MPI frees
  # neither its own nor its dlclosed components' start-up allocations. Memory errors and UB stay checked.
  local no_leaks=detect_leaks=0:abort_on_error=1
  # unit.save_order's driver under its LD_PRELOAD shim, which records write/fsync/rename per replaced
  # file (clang links ASan's runtime into the executable, so the shim may be loaded first).
  save_order() {
    local d rc=0
    d=$(mktemp -d /tmp/ciuic_save_order.XXXXXX)
    ASAN_OPTIONS=verify_asan_link_order=0:$ASAN_OPTIONS CIUIC_IO_TRACE="$d.log" CIUIC_IO_TRACE_MATCH="$d" \
      LD_PRELOAD="$PWD/libio_order_shim.so" ./save_order_driver "$d" "$d.log" || rc=$?
    rm -rf "$d" "$d.log"
    return "$rc"
  }
  # What is cut for time. ASan: gloo's rank-parameterised tests run at 2 ranks; test_tuner runs 69 of
  # its 82 tests, not the 13 that train the accuracy gate or run whole studies or searches at length
  # (20 minutes instrumented, a resumed study alone 8); the database writers store 100 runs each; the
  # runner's every-collective sweep runs at 2 and 3 rank-threads (its 1 and 8 run in the unit label:
  # under ASan the 8-thread sweep alone took 2.5 minutes). TSan: gloo's rank-parameterised tests at 2
  # ranks (at 3 and 4 they took 135 of test_gloo's 237 s), the rank-thread sweeps at 3, and not the
  # state file's random-kill saves (forked savers killed mid-write, 114 of test_collectives' 197 s
  # under TSan; they test durability, not threads, and run in the unit label and under ASan).
  local tuner_cut=Gate.*:Resume.AnInterruptedCpuLocalStudyResumes
  tuner_cut+=:Search.BayesAndCoordinateDescentReachTheGridOptimumWithFivePercentOfItsEvaluations
  tuner_cut+=:TuneCli.DefaultsLiveInTheDataFolderAndOutDashIsStdout:Study.CalibrateStoresKernelCurvesPerSizeAndAStudyWithoutALinkSaysSo
  tuner_cut+=:Study.AccumulationIsPricedGatedAndSuggestedOnlyWhereTheGatePassed:Study.WritesProfileAndTrialsAndResumesAnInterruptedStudy
  tuner_cut+=:Study.AGpuCalibrationDrivesTheCodecCostsOfItsTopology:Study.AClusterTopologyTakesItsLinksFromACalibrationUnderItsLauncher
  tuner_cut+=:Study.AThreeLevelTopologyGetsADepthThreeRuleThatTheRuntimeRunsAtDepthThree
  local t
  {
    case $name in
      asan-collectives | asan-bench | asan-core | asan-kernels)
        t=test_${name#asan-}
        (cd build-fuzz/tests && CIUIC_TEST_RANKS=2,3 "./$t" --gtest_brief=1) ;;
      asan-gloo) (cd build-fuzz/tests && ./test_gloo --gtest_brief=1 '--gtest_filter=-*/1:*/2') ;;
      asan-tuner)
        (cd build-fuzz/tests && CIUIC_TEST_GATE_CACHE="$SAN_ROOT/build-fuzz/gate_cache.db" ./test_tuner --gtest_brief=1 \
          "--gtest_filter=-$tuner_cut") ;;
      asan-cli) (cd build-fuzz/tests && ./test_cli --gtest_brief=1 '--gtest_filter=-CliMpi*') ;;
      asan-db-writers) (cd build-fuzz/tests && CIUIC_DB_WRITERS_RUNS=100 ./test_db_writers --gtest_brief=1) ;;
      asan-small)
        (cd build-fuzz/tests && ./test_c_api && ./test_progress --gtest_brief=1 && ./test_compare && ./test_nccl_flags && ./test_c_codec_api &&
          ./test_c_store_api && ASAN_OPTIONS=$no_leaks ./test_nccl_tuner --gtest_brief=1 && save_order) ;;
      asan-mpi)
        (cd build-fuzz/tests && export ASAN_OPTIONS=$no_leaks &&
          mpiexec -n 2 --oversubscribe ./test_mpi --gtest_brief=1 && mpiexec -n 2 --oversubscribe ./test_c_mpi &&
          ./test_cli --gtest_brief=1 '--gtest_filter=CliMpi*') ;;
      asan-bad-inputs)
        # The 1069 cases through the instrumented tools.
        BAD_INPUTS_GATE_DB="$SAN_GATE_DB" BAD_INPUTS_CONTROL_TIMEOUT=600 tests/scripts/bad_inputs.sh build-fuzz/bin/ciuic-bench \
          build-fuzz/bin/ciuic-tune build-fuzz/tests/state_load_driver tests/data/bad ;;
      tsan-*)
        # Suppressions: only uninstrumented libraries, each entry with its reason (tests/sanitizers/tsan.supp).
        unset ASAN_OPTIONS UBSAN_OPTIONS
        t=test_${name#tsan-}
        local filter=()
        case $t in
          test_collectives) filter=('--gtest_filter=-RuntimeState.ASaveKilledAtAnyMomentLeavesTheOldOrTheNewFile') ;;
          test_gloo) filter=('--gtest_filter=-*/1:*/2') ;;
          # The accuracy gate trains its model on ranks as threads (tuner/gate.cc); the calibration's
          # copies run on threads at once (KernelSweep: one codec, one size). The full calibration and a
          # 16-rank study took 177 and 194 s under TSan (clean by hand) and stay out.
          test_tuner) filter=('--gtest_filter=Gate.VerdictsAreDeterministicAndOptionsChecked:KernelSweep.*') ;;
        esac
        (cd build-tsan/tests && TSAN_OPTIONS=$SAN_TSAN_OPTIONS CIUIC_TEST_RANKS=3 "./$t" "${filter[@]}" --gtest_brief=1) ;;
      fuzz-*)
        # Each harness for a short while from its seeds (scripts/fuzz.sh SECONDS for longer runs); the
        # tree is built already.
        CIUIC_FUZZ_BUILT=1 scripts/fuzz.sh "$SAN_FUZZ_SECONDS" "${name#fuzz-}" | sed -n '2,$s/^/fuzz /p' ;;
      *) echo "san_job: unknown job $name"; false ;;
    esac
  } >"$log" 2>&1 || rc=$?
  # A fuzz job passes only on its harness's own "no finding" line (pipefail gives fuzz.sh's exit).
  if [ "$rc" -eq 0 ] && [[ $name == fuzz-* ]] && ! grep -q 'no finding$' "$log"; then rc=1; fi
  if [ "$rc" -ne 0 ]; then
    touch "${log%.log}.failed"
    { tail -n 40 "$log"; echo "test: sanitizer job $name failed (exit $rc; log: build-fuzz/jobs/$name.log)"; } >&2
  else
    touch "${log%.log}.ok"
    # The CPU time of the job's processes (bash's `times`, children's line): which jobs the stage's
    # two cores spend their time on, user and kernel apart. Written to a file by this shell itself: in
    # a command substitution `times` would report the substitution's own (empty) children.
    local cpu
    times >"${log%.log}.times"
    cpu=$(sed -n '2s/^\([0-9]*\)m\([0-9.]*\)s \([0-9]*\)m\([0-9.]*\)s$/\1 \2 \3 \4/p' "${log%.log}.times" |
      awk '{ printf "user %.0f s, sys %.0f s", $1 * 60 + $2, $3 * 60 + $4 }')
    echo "san: $name ok, $((SECONDS - t0)) s${cpu:+ ($cpu)}"
  fi
  return 0
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
  # With the sanitizer stage to come, the bad-input corpus (unit.bad_inputs) runs there once, through
  # the instrumented tools, instead of twice (about a minute of both cores).
  unit_cut=()
  [ "$mode" = all ] && unit_cut=(-E '^unit\.bad_inputs$')
  run_label unit "nothing to run" -j "$(nproc)" "${unit_cut[@]}"
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
  # The sanitizer stage's jobs, three at a time (xargs -P; CIUIC_SAN_JOBS=N for another count): most are
  # one process on one core (the rank-thread tests use both for part of their time), and many wait on
  # deadlines. One after another they left a core idle for about half of the stage's 19 minutes; two at
  # a time the stage took 834 s here, three at a time 768 s. Longest first, so the last job to start is a
  # short one.
  # Each job logs to build-fuzz/jobs/NAME.log and says "san: NAME ok, N s" or prints its log's tail; the
  # stage goes on past a failure (every job's verdict is shown) and fails after.
  # The accuracy gate's verdicts for test_tuner come from the uninstrumented build's tests
  # (tests/tuner/gate_cache.h; the same sources): computed instrumented they took 9 of its 10 minutes.
  tuner_cache=$(ls -t build/tests/gate_cache-*.db 2>/dev/null | head -n 1 || true)
  rm -f build-fuzz/gate_cache.db
  [ -n "$tuner_cache" ] && cp "$tuner_cache" build-fuzz/gate_cache.db
  # The bad-input corpus's workload control runs a small study, whose accuracy gate instrumented takes
  # minutes: it starts from the verdicts of an uninstrumented run (the same gate options), where build/
  # has one.
  gate_dir=$(mktemp -d)
  trap 'rm -rf "$gate_dir"' EXIT
  if [ -x build/bin/ciuic-tune ]; then
    build/bin/ciuic-tune run --topology dgx_a100 --workload resnet50 --strategy random --budget 2 --gate-seeds 1 \
      --db "$gate_dir/gate.db" --out "$gate_dir/gate.json" >"$gate_dir/gate.log" 2>&1 || true
  fi
  gate_db=""
  [ -s "$gate_dir/gate.db" ] && gate_db="$gate_dir/gate.db"
  rm -rf build-fuzz/jobs
  mkdir -p build-fuzz/jobs
  export SAN_ROOT=$root SAN_GATE_DB=$gate_db SAN_FUZZ_SECONDS=${CIUIC_FUZZ_SECONDS:-10}
  export SAN_TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp"
  san_jobs | xargs -P "${CIUIC_SAN_JOBS:-3}" -I '{}' bash -c "set -o pipefail; $(declare -f san_job); san_job \"\$1\"" _ '{}' || true
  failed=$(cd build-fuzz/jobs && for f in *.failed; do [ -e "$f" ] && printf '%s ' "${f%.failed}"; done; true)
  ran=$(ls build-fuzz/jobs/*.ok 2>/dev/null | wc -l)
  expected=$(san_jobs | wc -l)
  if [ -n "$failed" ] || [ "$ran" -ne "$expected" ]; then
    echo "test: the sanitizer stage failed: ${failed:-} (${ran} of ${expected} jobs passed)" >&2
    exit 1
  fi
  rm -rf "$gate_dir"
  trap - EXIT
  grep -h '^fuzz ' build-fuzz/jobs/fuzz-*.log | sed 's/^fuzz /test: fuzz /'
  summary+=("asan+ubsan: every gtest binary (test_gloo at 2 ranks, test_tuner without its 13 longest studies and gate trainings; unit.save_order's driver under its LD_PRELOAD shim), test_mpi and test_c_mpi under mpiexec, the bad-input corpus clean")
  summary+=("tsan: $(san_jobs | sed -n 's/^tsan-/test_/p' | tr '\n' ' ')clean")
  summary+=("fuzz: $(san_jobs | grep -c '^fuzz-') harnesses x ${SAN_FUZZ_SECONDS} s, no finding")
  stage "sanitizer tests and fuzzing (${CIUIC_SAN_JOBS:-3} jobs at a time)"
fi
summary+=("time: $((SECONDS - t_start)) s")
printf 'test: %s\n' "${summary[@]}"
# The closing line: every ctest test that ran, over all labels (a failure exited above).
echo "ciuic: ${passed_all} passed, 0 failed, ${skipped_all} skipped"
