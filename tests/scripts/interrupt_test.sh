#!/usr/bin/env bash
# The signal contract of ciuic-tune (docs/ciuic-tune.md; ciuic-bench's own, SIGINT / SIGTERM /
# SIGKILL to its self-launch, is in the fault matrix, tests/scripts/fault_matrix.sh):
#   - SIGTERM / SIGINT to ciuic-tune while it measures (a ciuic-bench child running): "interrupted",
#     exit 143 / 130, no ciuic-bench left, the study's database intact with what it held before;
#   - SIGKILL to ciuic-tune: its ciuic-bench child and that child's ranks end, none left.
# Usage: interrupt_test.sh CIUIC_TUNE
set -u
tune=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
# Waits until at least N processes match PATTERN (up to S seconds: the tune case first runs its gate).
wait_for() {
  for _ in $(seq 1 $(($3 * 10))); do
    [ "$(pgrep -f -- "$2" | wc -l)" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
# Checks no process matches PATTERN within S seconds.
none_left() {
  for _ in $(seq 1 $(($2 * 10))); do
    pgrep -f -- "$1" >/dev/null || return 0
    sleep 0.1
  done
  echo "    left running: $(pgrep -af -- "$1" | head -3)"
  return 1
}
# SIG CODE ERRFILE: SIGINT/SIGTERM end with 130/143 and the tool's "interrupted" line; SIGKILL with the
# shell's 137.
interrupted() {
  case $1 in
    INT) [ "$2" -eq 130 ] && grep -q "interrupted (SIGINT)" "$3" ;;
    TERM) [ "$2" -eq 143 ] && grep -q "interrupted (SIGTERM)" "$3" ;;
    KILL) [ "$2" -eq 137 ] ;;
  esac
}
verdict() {  # NAME OK
  printf '%-40s %s\n' "$1" "$2"
  [ "$2" = yes ] || fail=1
}

# The accuracy gate (about 25 s on the 2-core VM) runs once, into a database each tune case starts from
# a copy of: the verdicts are read back, so a case reaches its first measurement at once, and the
# study stored there before the signal must still be there after it.
seed_db="$work/gate.db"
"$tune" run --topology cpu_local --mode model --workload resnet50 --gate-seeds 1 --accumulation 1 --band-candidates 1 \
  --strategy random --budget 8 --seed 3 --db "$seed_db" --out "$work/gate.profile.json" >"$work/gate.out" 2>&1 ||
  { tail -n 4 "$work/gate.out"; echo "interrupt_test: the seed study failed"; exit 1; }
for sig in TERM INT KILL; do
  db="$work/tune-$sig.db"
  cp "$seed_db" "$db"
  "$tune" run --topology cpu_local --mode measure --workload resnet50 --gate-seeds 1 --accumulation 1 --band-candidates 1 \
    --strategy random --budget 50 --seed 3 --db "$db" --out "$work/tune-$sig.profile.json" \
    >"$work/tune-$sig.out" 2>"$work/tune-$sig.err" &
  tpid=$!
  ok=yes
  wait_for 1 "ciuic_tune_${tpid}_" 180 || ok=no  # a ciuic-bench measurement of this study is running
  sleep 1
  kill -s "$sig" "$tpid"
  wait "$tpid"
  code=$?
  interrupted "$sig" "$code" "$work/tune-$sig.err" || ok=no
  none_left "ciuic_tune_${tpid}_" 10 || ok=no
  # intact, and the study stored before the signal still there
  /usr/bin/python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=c.execute('pragma integrity_check').fetchone()[0]; n=c.execute(\"select count(*) from studies where status = 'done'\").fetchone()[0]; sys.exit(r != 'ok' or n < 1)" "$db" || ok=no
  [ "$ok" = yes ] || sed 's/^/    /' "$work/tune-$sig.err" | tail -n 4
  verdict "ciuic-tune measuring, SIG$sig (exit $code)" "$ok"
done
[ "$fail" -eq 0 ] && echo "interrupt_test: every check passed"
exit "$fail"
