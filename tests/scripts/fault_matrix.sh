#!/usr/bin/env bash
# Fault matrix for ciuic-bench's deadlines. One rank fails — SIGSTOP, SIGKILL or exit(1), injected
# at a known point through $CIUIC_FAULT (core/fault.h) — in one of three phases: start-up (before
# MPI_Init), the control plane (the agreement before a row) or the collective (a timed iteration);
# with 2, 3 or 4 ranks; launched by ciuic-bench itself (--ranks N) or by a plain mpiexec; over the
# mpi and ciuic backends. Two more cases send SIGTERM from outside during the collective.
#
# Every case must end within 2x the timeout of the fault (plus 1 s for the launcher to reap), and:
#   - exit 2, except a SIGKILLed rank under a plain mpiexec: mpiexec ends the job itself with its
#     own code (137) before any surviving rank can speak, and that is what the user's shell sees;
#   - name the culprit: ciuic's line with the victim's pid (the rank that timed out names a stopped
#     rank, the self-launch names the rank that went silent first, the victim itself says it called
#     exit()), or, for that one mpiexec-only case, mpiexec's line naming the rank.
# Prints one row per case; exits 1 if any case fails.
# Usage: fault_matrix.sh CIUIC_BENCH [--full] [TIMEOUT_S]
#   default: each action x phase x launcher x backend once, the rank count rotating over 2, 3, 4
#   (38 cases); --full: every rank count (110 cases).
set -u
bench=$1
shift
full=no
if [ "${1:-}" = --full ]; then full=yes; shift; fi
timeout_s=${1:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'pkill -CONT -f "$work" 2>/dev/null; pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
now() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }
failures=0
cases=0
crashes=0
printf '%-7s %-10s %-7s %-7s %-5s %8s %5s %-7s %s\n' fault phase launch backend ranks seconds exit culprit verdict

# run_case ACTION PHASE LAUNCHER BACKEND RANKS
run_case() {
  local action=$1 phase=$2 launcher=$3 backend=$4 ranks=$5
  local victim=$((ranks - 1))
  local tag="$work/case-$action-$phase-$launcher-$backend-$ranks"
  local after=1
  [ "$phase" = control ] && after=2      # the second row's agreement: the first row ran
  [ "$phase" = collective ] && after=40  # well into a row's iterations
  local args=(allreduce --backend "$backend" --sizes 256K:512K --iters 200 --timeout "$timeout_s" --inplace no
    --out "$tag.json" --format json)
  local start code secs named ok want=2 fault_t=""
  start=$(now)
  if [ "$launcher" = self ]; then
    CIUIC_FAULT="$phase:$victim:$action:$after" "$bench" "${args[@]}" --ranks "$ranks" >/dev/null 2>"$tag.err" &
  else
    CIUIC_FAULT="$phase:$victim:$action:$after" mpiexec -n "$ranks" --oversubscribe -x CIUIC_FAULT \
      "$bench" "${args[@]}" >/dev/null 2>"$tag.err" &
  fi
  local pid=$!
  # a hung case is ended after 4x the timeout plus start-up and counts as failed
  for _ in $(seq 1 $((timeout_s * 40 + 60))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  wait "$pid"
  code=$?
  local end
  end=$(now)
  local line vpid=""
  line=$(grep -m1 'fault injection:' "$tag.err")
  if [ -n "$line" ]; then
    vpid=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' <<<"$line")
    fault_t=$(sed -n 's/.* at t=\([0-9.]*\).*/\1/p' <<<"$line")
  fi
  secs=$(awk -v e="$end" -v f="${fault_t:-$start}" 'BEGIN { printf "%.1f", e - f }')
  named=no
  if [ -n "$vpid" ] && grep -v 'fault injection:' "$tag.err" | grep -q "(pid $vpid)"; then named=yes; fi
  if [ "$launcher" = mpiexec ] && [ "$action" = kill ]; then
    want=137
    grep -q "process rank $victim .*exited on signal 9" "$tag.err" && named=mpiexec
  fi
  # Open MPI 4.1's mpiexec can itself crash in its own teardown (orte_finalize) after it has ended the
  # job (seen once in a CI run; 0 times in 12 reruns of that case here): the user's shell then sees its
  # signal, not the ranks' code. Such a case passes only when mpiexec had reported a surviving rank's
  # exit code 2 first, and the table marks it.
  local mark=""
  if [ "$launcher" = mpiexec ] && [ "$code" -gt 128 ] && [ "$code" -ne 137 ] \
    && grep -q "^\[[^]]*:$pid\] .*mpiexec(" "$tag.err" && grep -q "orte_finalize" "$tag.err" \
    && grep -Eq '^ *Exit code: +2$' "$tag.err"; then
    want=$code
    mark=" (mpiexec crashed in orte_finalize after the ranks' exit 2)"
    crashes=$((crashes + 1))
  fi
  ok=yes
  [ "$code" -eq "$want" ] || ok=no
  [ -n "$fault_t" ] || ok=no
  awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= 2 * t + 1) }' || ok=no
  [ "$named" != no ] || ok=no
  printf '%-7s %-10s %-7s %-7s %-5s %8s %5s %-7s %s\n' "$action" "$phase" "$launcher" "$backend" "$ranks" "$secs" \
    "$code" "$named" "$ok$mark"
  cases=$((cases + 1))
  if [ "$ok" != yes ]; then
    failures=$((failures + 1))
    grep -v '^#' "$tag.err" | sed 's/^/    /' | tail -n 6
  fi
}

# SIGTERM from outside while the collective runs (a scheduler ending the job): ciuic-bench forwards
# it to mpiexec, which ends the ranks; exit 2 naming the rank that went silent first.
term_case() {
  local backend=$1 ranks=$2
  local tag="$work/case-term-$backend-$ranks"
  "$bench" allreduce --backend "$backend" --ranks "$ranks" --sizes 256K --iters 1000000 --timeout "$timeout_s" \
    --inplace no --out "$tag.json" --format json >/dev/null 2>"$tag.err" &
  local launcher=$! victim=""
  for _ in $(seq 1 100); do
    mapfile -t pids < <(pgrep -f -- "--out $tag.json" | grep -v "^$launcher\$")
    if [ "${#pids[@]}" -ge $((ranks + 1)) ]; then victim=${pids[-1]}; break; fi
    sleep 0.1
  done
  sleep 1
  local start
  start=$(now)
  [ -n "$victim" ] && kill -TERM "$victim" 2>/dev/null
  for _ in $(seq 1 $((timeout_s * 40))); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then kill -KILL "$launcher"; fi
  wait "$launcher"
  local code=$? secs named=no ok=yes
  secs=$(awk -v e="$(now)" -v s="$start" 'BEGIN { printf "%.1f", e - s }')
  grep -q "(pid $victim)" "$tag.err" 2>/dev/null && named=yes
  [ "$code" -eq 2 ] || ok=no
  awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= 2 * t + 1) }' || ok=no
  [ "$named" = yes ] && [ -n "$victim" ] || ok=no
  printf '%-7s %-10s %-7s %-7s %-5s %8s %5s %-7s %s\n' term collective self "$backend" "$ranks" "$secs" "$code" \
    "$named" "$ok"
  cases=$((cases + 1))
  if [ "$ok" != yes ]; then
    failures=$((failures + 1))
    sed 's/^/    /' "$tag.err" | tail -n 5
  fi
}

i=0
for action in stop kill exit; do
  for phase in startup control collective; do
    for launcher in self mpiexec; do
      for backend in mpi ciuic; do
        if [ "$full" = yes ]; then
          for ranks in 2 3 4; do run_case "$action" "$phase" "$launcher" "$backend" "$ranks"; done
        else
          run_case "$action" "$phase" "$launcher" "$backend" $((2 + i % 3))
        fi
        i=$((i + 1))
      done
    done
  done
done
term_case mpi 3
term_case ciuic 2
echo "fault matrix: $cases case(s), $failures failing, $crashes with mpiexec crashing in its own teardown"
[ "$failures" -eq 0 ]
