#!/bin/sh
set -e
export CIUIC_DATA_DIR="/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/data"
if [ 0 -eq 1 ]; then
  echo "lab-tune: calibrate" >&2
  "/work/main/build/bin/ciuic-tune" calibrate --ranks 2,4 --rounds 2 --db "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/lab.db" >"/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/calibrate.log" 2>&1
fi
# The machine's own speed as the run goes on: one process's topk:0.01 encode of 16M floats and its
# copy rate (a shared VM's CPU can drift by tens of percent over a run; the table reports it).
canary() {
  "/work/main/build/bin/ciuic-bench" compress --codec topk:0.01 --sizes 16M --data normal --format json     --out "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/canary-$1.json" >/dev/null 2>&1 || echo "lab-tune: the canary failed ($1)" >&2
}
rm -f "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck"/canary-*.json
canary 0-before-study
if [ 0 -eq 1 ]; then
  echo "lab-tune: run --mode measure" >&2
  "/work/main/build/bin/ciuic-tune" run --topology cluster_lab --mode measure --budget 16 --workload "resnet50" \
    --gate-seeds 1 --db "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/lab.db" --out "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/cluster_lab.profile.json" >"/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/study.log" 2>&1
fi
canary 1-after-study
rm -f "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck"/profile_run*.json "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck"/baseline_run*.json
# The bands' sizes in the study's iteration groups: below 16M (40 iterations), below 256M (7), from
# 256M up (3).
sizes() {
  python3 -c '
import json, math, sys
rules = json.load(open(sys.argv[1]))["rules"]
out = []
for r in rules:
    lo, hi = r["min_bytes"], r.get("max_bytes") or 0
    size = int((math.sqrt(max(lo, 4096) * hi) if hi else 4.0 * lo) / 4) * 4
    group = "tiny" if size < 16 << 20 else "mid" if size < 256 << 20 else "big"
    if group == sys.argv[2]: out.append(str(size))
print(",".join(out))' "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/cluster_lab.profile.json" "$1"
}
for run in $(seq 1 7); do
  canary "2-round$(printf %02d $run)"
  for part in tiny mid big; do
    s=$(sizes $part)
    [ -n "$s" ] || continue
    case $part in tiny) it="-n 40 -w 5" ;; mid) it="-n 7 -w 2" ;; *) it="-n 3 -w 1" ;; esac
    # Odd rounds the profile first, even rounds the baseline first (as the study's pairs): a drift of
    # the machine favours neither.
    order="profile baseline"
    [ $((run % 2)) -eq 1 ] || order="baseline profile"
    echo "lab-tune: run $run: ${order% *} then ${order#* } at $s" >&2
    for side in $order; do
      if [ $side = profile ]; then
        "/work/main/build/bin/ciuic-bench" allreduce --backend ciuic --profile "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/cluster_lab.profile.json" --ranks 4 --sizes "$s" --inplace yes           $it --format json --out "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/profile_run$run-$part.json" >/dev/null
      else
        "/work/main/build/bin/ciuic-bench" allreduce --backend ciuic --algo native --bucket 25M --ranks 4 --sizes "$s"           --inplace yes $it --format json --out "/work/main/bench/results/2026-11-26-lab-tuner-lossless-search/recheck/baseline_run$run-$part.json" >/dev/null
      fi
    done
  done
done
