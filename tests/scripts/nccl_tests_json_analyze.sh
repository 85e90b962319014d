#!/usr/bin/env bash
# nccl-tests' own analysis tool reads ciuic-bench's -J file: a 2-process run (mpiexec, self-launched) with -J FILE.json -I 1, then
# nccl-tests' tools/analyze_perf_json.py on it, out-of-place and in-place, every analysis (--all).
#
#     nccl_tests_json_analyze.sh CIUIC_BENCH
#
# The tool is nccl-tests' (BSD-licensed, NVIDIA) and is not shipped here: point
# NCCL_TESTS_ANALYZE_PERF_JSON at a copy from nccl-tests' source
# (e.g. git -C nccl-tests show HEAD:tools/analyze_perf_json.py > /tmp/analyze_perf_json.py).
# Without it, or without python3, the test says so and exits 77 (ctest: skipped, not passed).
set -u
bench=$1
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: no python3 to run nccl-tests' analyze_perf_json.py"
  exit 77
fi
tool=${NCCL_TESTS_ANALYZE_PERF_JSON:-}
if [ -z "$tool" ] || [ ! -f "$tool" ]; then
  echo "SKIPPED: set NCCL_TESTS_ANALYZE_PERF_JSON to nccl-tests' tools/analyze_perf_json.py (not shipped" \
       "with ciuic; got '${tool}')"
  exit 77
fi

work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$bench" allreduce --ranks 2 -b 4K -e 1M -f 16 -n 8 -w 2 -J "$work/r.json" -I 1 \
  >"$work/table" 2>"$work/err" || { cat "$work/err" >&2; fail "ciuic-bench exited $?"; }
sizes="4096 65536 1048576"

for placement in OOP IP; do
  flag=""
  [ "$placement" = IP ] && flag="--in-place"
  out="$work/analysis-$placement.txt"
  python3 "$tool" "$work/r.json" --all $flag >"$out" 2>&1 || { cat "$out" >&2; fail "analyze_perf_json.py $flag exited non-zero"; }
  echo "---- analyze_perf_json.py --all $flag"
  cat "$out"
  grep -q '^  Version:    3$' "$out" || fail "$placement: version not 3"
  grep -q '^  Results:    3$' "$out" || fail "$placement: not 3 results"
  grep -q '^  Iterations: 8  (agg: 1)$' "$out" || fail "$placement: iterations"
  grep -q '^  Process rows: 2$' "$out" || fail "$placement: not 2 process rows"
  grep -q "^Consistency (times_us == max over process rows, $placement): PASS$" "$out" ||
    fail "$placement: times_us is not the per-iteration maximum over the ranks' rows"
  grep -q "^PER-PROCESS STRAGGLER ANALYSIS ($placement)" "$out" || fail "$placement: no straggler analysis"
  grep -q "^PER-NODE ANALYSIS (1 nodes, process-max rows, $placement)" "$out" || fail "$placement: node analysis"
  for s in $sizes; do
    # The stats table and the iteration-0 table: one line per size, the size first.
    [ "$(grep -cE "^ +$s +[0-9]" "$out")" -eq 2 ] || fail "$placement: size $s not in both tables"
  done
  [ "$(grep -c 'fastest=process' "$out")" -eq 3 ] || fail "$placement: straggler lines"
done
echo "PASS: nccl-tests' analyze_perf_json.py read the 2-rank -J file (3 sizes, both placements)"
