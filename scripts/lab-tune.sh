#!/usr/bin/env bash
# The tuner on the multi-host lab, end to end, in one lab (scripts/cluster-lab.sh, 2 hosts x 2 ranks
# at RATE):
#   1. ciuic-tune calibrate --ranks 2,4: codec kernels, and the ring step within a host (2 ranks: the
#      hostfile fills labhost0 first) and across hosts (4 ranks);
#   2. ciuic-tune run --topology cluster_lab --mode measure: every trial timed on the lab's 4 ranks,
#      the links taken from step 1;
#   3. at each size band's representative size (the one the study measured): the profile applied by
#      ciuic-bench --profile, and the NCCL-defaults-style baseline (MPI's allreduce in 25 MiB buckets:
#      --backend ciuic --algo native --bucket 25M), in one ciuic-bench run each;
# then a table per band: the study's prediction, its own measurement, the profile's and the baseline's
# time now, the predicted and measured speed-up over the baseline.
#   scripts/lab-tune.sh [--rate 1gbit] [--budget 16] [--workload W] [--out DIR] [--skip-calibrate]
# Needs root and a build in build/ (or $CIUIC_BUILD).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit budget=16 workload=resnet50 out="" calibrate=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-calibrate) calibrate=0; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lab-tune: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
build=$(cd "${CIUIC_BUILD:-build}" && pwd)
[ -x "$build/bin/ciuic-tune" ] || { echo "lab-tune: $build/bin/ciuic-tune is missing (scripts/build.sh)" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d /tmp/lab-tune.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -f "$workload" ] && workload=$(cd "$(dirname "$workload")" && pwd)/$(basename "$workload")
db="$out/lab.db"
profile="$out/cluster_lab.profile.json"

cat >"$out/tune.sh" <<EOF
#!/bin/sh
set -e
export CIUIC_DATA_DIR="$out/data"
if [ $calibrate -eq 1 ]; then
  echo "lab-tune: calibrate" >&2
  "$build/bin/ciuic-tune" calibrate --ranks 2,4 --rounds 2 --db "$db" >"$out/calibrate.log" 2>&1
fi
echo "lab-tune: run --mode measure" >&2
"$build/bin/ciuic-tune" run --topology cluster_lab --mode measure --budget $budget --workload "$workload" \\
  --gate-seeds 1 --db "$db" --out "$profile" >"$out/study.log" 2>&1
sizes=\$(python3 -c '
import json, math, sys
rules = json.load(open(sys.argv[1]))["rules"]
out = []
for r in rules:
    lo, hi = r["min_bytes"], r.get("max_bytes") or 0
    size = math.sqrt(max(lo, 4096) * hi) if hi else 4.0 * lo
    out.append(str(int(size / 4) * 4))
print(",".join(out))' "$profile")
echo "lab-tune: the profile and the baseline at \$sizes" >&2
"$build/bin/ciuic-bench" allreduce --backend ciuic --profile "$profile" --ranks 4 --sizes "\$sizes" --inplace yes \\
  -n 5 -w 2 --format json --out "$out/profile_run.json" >/dev/null
"$build/bin/ciuic-bench" allreduce --backend ciuic --algo native --bucket 25M --ranks 4 --sizes "\$sizes" \\
  --inplace yes -n 5 -w 2 --format json --out "$out/baseline_run.json" >/dev/null
EOF
chmod +x "$out/tune.sh"
scripts/cluster-lab.sh --hosts 2 --ranks-per-host 2 --rate "$rate" --run -- "$out/tune.sh"

python3 - "$out" <<'PY' | tee "$out/table.md"
import json, math, os, sys
out = sys.argv[1]
prof = json.load(open(os.path.join(out, "cluster_lab.profile.json")))
def times(name):
    doc = json.load(open(os.path.join(out, name)))
    return {r["size_bytes"]: r.get("time_p50_us") or r.get("time_us") for r in doc["results"] if r.get("time_us")}
p, b = times("profile_run.json"), times("baseline_run.json")
def fs(x):
    for u, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= f: return f"{x / f:.3g}{u}"
    return str(int(x))
pv, step = prof["provenance"], prof["step"]
print(f"# cluster_lab (2 hosts x 2 ranks): study {pv['study_id']} ({pv['mode']}, {pv['strategy']}, "
      f"budget {pv['budget']}), commit {pv['git_commit']}")
print(f"# step: predicted {step['predicted_us'] / 1e3:.1f} ms vs baseline {step['baseline_us'] / 1e3:.1f} ms "
      f"({step['baseline_us'] / step['predicted_us']:.2f}x predicted)\n")
print("| band | size | rule | predicted ms | study measured ms | profile now ms | baseline now ms | speed-up now | predicted/measured |")
print("|---|---|---|---|---|---|---|---|---|")
for r in prof["rules"]:
    lo, hi = r["min_bytes"], r.get("max_bytes") or 0
    size = int((math.sqrt(max(lo, 4096) * hi) if hi else 4.0 * lo) / 4) * 4
    rule = f"{r['algo']} {r['codec']}" + (f" {r['precision']}" if r.get("precision", "fp32") != "fp32" else "")
    pred, meas = r.get("predicted_us"), r.get("measured_us")
    pn, bn = p.get(size), b.get(size)
    cells = [f"[{fs(lo)}, {fs(hi) if hi else 'inf'})", fs(size), rule,
             f"{pred / 1e3:.2f}" if pred else "-", f"{meas / 1e3:.2f}" if meas else "-",
             f"{pn / 1e3:.2f}" if pn else "-", f"{bn / 1e3:.2f}" if bn else "-",
             f"{bn / pn:.2f}x" if pn and bn else "-", f"{pred / pn:.2f}" if pred and pn else "-"]
    print("| " + " | ".join(cells) + " |")
PY
echo "lab-tune: results in $out" >&2
