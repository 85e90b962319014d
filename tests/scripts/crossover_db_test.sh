#!/usr/bin/env bash
# `ciuic-tune calibrate --ranks 2` stores --algo auto's crossover in the calibration database, and
# ciuic-bench's default (`--crossover db`) runs that table: the bands it logs are the ones calibrate
# printed. Asked for explicitly where nothing is calibrated (3 ranks), db is one line and exit 1; with
# no database the built-in table is the default.
# Usage: crossover_db_test.sh CIUIC-TUNE CIUIC-BENCH
set -euo pipefail
tune=$1
bench=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "crossover_db: $*" >&2; exit 1; }

export CIUIC_DATA_DIR=$work/empty
"$bench" allreduce --backend ciuic --sizes 1K --iters 2 --warmup 1 >"$work/builtin.out" 2>"$work/builtin.err" ||
  fail "the run without a database failed: $(cat "$work/builtin.err")"
grep -q 'auto: native <2K, ring <512K, native <8M, ring; out of place: native <2K, ring (built-in (mpi, one host)' "$work/builtin.err" ||
  fail "without a database auto did not say it runs the built-in table: $(cat "$work/builtin.err")"

export CIUIC_DATA_DIR=$work/data
mkdir -p "$CIUIC_DATA_DIR"
"$tune" calibrate --ranks 2 --sizes 64K --rounds 1 --concurrency 1 --link-sizes 4K --train-kernels no --db "$CIUIC_DATA_DIR/ciuic.db" \
  >"$work/cal.out" 2>"$work/cal.err" || fail "calibrate failed: $(tail -n 3 "$work/cal.err")"
table=$(sed -n 's/^#   2 ranks: auto = //p' "$work/cal.out")
[ -n "$table" ] || fail "calibrate printed no crossover for 2 ranks: $(cat "$work/cal.out")"
echo "calibrated: $table"

"$bench" allreduce --backend ciuic --sizes 1K,4M --iters 2 --warmup 1 >"$work/db.out" 2>"$work/db.err" ||
  fail "the run with the calibration failed: $(cat "$work/db.err")"
line=$(grep 'auto: ' "$work/db.err" || true)
echo "ciuic-bench: $line"
case "$line" in
  *"auto: $table (calibrated "*" for 2 ranks over mpi, $CIUIC_DATA_DIR/ciuic.db)") ;;
  *) fail "ciuic-bench did not run the calibrated table '$table': $line" ;;
esac

rc=0
"$bench" allreduce --backend ciuic --ranks 3 --crossover db --sizes 1K --iters 2 >"$work/3.out" 2>"$work/3.err" || rc=$?
[ "$rc" -eq 1 ] || fail "3 ranks with nothing calibrated: exit $rc, expected 1"
grep -v '^ciuic-bench: starting 3 ranks' "$work/3.err" >"$work/3.lines" || true
[ "$(wc -l <"$work/3.lines")" -eq 1 ] || fail "3 ranks: expected one line, got: $(cat "$work/3.err")"
grep -q "holds no crossover for 3 ranks over mpi" "$work/3.lines" || fail "3 ranks: $(cat "$work/3.lines")"
echo "crossover_db: calibrated table run by default; nothing calibrated for 3 ranks refused in one line"
