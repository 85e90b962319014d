#!/usr/bin/env bash
# On a shaped link (scripts/netlab.sh), times the uncompressed ciuic ring and each codec on the same
# allreduce and prints the effective speed-up (uncompressed time / codec time) beside the error.
#   scripts/netlab-compare.sh [RATE=2gbit] [SIZE=64M] [RANKS=2] [CODECS...]
# Needs root (netlab.sh) and a build in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-2gbit} size=${2:-64M} ranks=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
codecs=("$@")
[ ${#codecs[@]} -gt 0 ] || codecs=(fp16 bf16 int8 fp8e4m3 int4 sign1 topk:0.01 randomk:0.01 powersgd:4)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # codec -> json
  scripts/netlab.sh --rate "$rate" -- build/bin/ciuic-bench allreduce --backend ciuic --codec "$1" \
    --sizes "$size" --ranks "$ranks" --iters 3 --warmup 1 --inplace yes --format json --out "$out/$2.json" >/dev/null 2>&1
}
run none base
printf '%-14s %-9s %12s %9s %12s %12s\n' codec algo time_us speedup rel_l2 max_abs
for c in none "${codecs[@]}"; do
  name=$(echo "$c" | tr ':' '_')
  [ "$c" = none ] || run "$c" "$name" || { printf '%-14s failed\n' "$c"; continue; }
  [ "$c" = none ] && name=base
  python3 - "$out/base.json" "$out/$name.json" "$c" <<'PY'
import json, sys
base, run, codec = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
b = [r for r in base["results"] if r.get("time_us")][0]
r = [r for r in run["results"] if r.get("time_us")][0]
err = lambda k: f"{r[k]:12.3e}" if r.get(k) is not None else f"{'-':>12}"
print(f"{codec:<14} {run['context']['algo']:<9} {r['time_us']:12.1f} {b['time_us'] / r['time_us']:8.2f}x {err('rel_l2_error')} {err('max_abs_error')}")
PY
done
