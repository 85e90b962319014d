#!/usr/bin/env bash
# The tuner on the multi-host lab, end to end, in one lab (scripts/cluster-lab.sh, 2 hosts x 2 ranks
# at RATE):
#   1. ciuic-tune calibrate --ranks 2,4: codec kernels, and the ring step within a host (2 ranks: the
#      hostfile fills labhost0 first) and across hosts (4 ranks);
#   2. ciuic-tune run --topology cluster_lab --mode measure: every trial timed on the lab's 4 ranks,
#      the links taken from step 1; per size band the model's best few and the baseline timed at the
#      band's representative size the runtime's way, the fastest measured kept as the rule;
#   3. at those sizes, --rounds times in turn (odd rounds the profile first): the profile applied by
#      ciuic-bench --profile, and the NCCL-defaults-style baseline (MPI's allreduce in 25 MiB buckets:
#      --backend ciuic --algo native --bucket 25M), one run each, with the study's iterations per size;
# then a table per band: the rule, the model's time, the study's measured time for the rule and for the
# baseline (the predicted speed-up), the profile's and the baseline's time now (the measured speed-up
# of each of --rounds rounds and their median), the median over the predicted speed-up, and the ratio
# of the median times (the baseline's over the profile's) over the predicted speed-up.
#   scripts/lab-tune.sh [--rate 1gbit] [--budget 16] [--workload W] [--out DIR] [--skip-calibrate]
#                       [--rounds 2] [--check-only]   (--check-only: step 3 alone, on DIR's profile)
# Needs root and a build in build/ (or $CIUIC_BUILD).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit budget=16 workload=resnet50 out="" calibrate=1 study=1 rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-calibrate) calibrate=0; shift ;;
    --check-only) calibrate=0 study=0; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lab-tune: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
build=$(cd "${CIUIC_BUILD:-build}" && pwd)
[ -x "$build/bin/ciuic-tune" ] || { echo "lab-tune: $build/bin/ciuic-tune is missing (scripts/build.sh)" >&2; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "lab-tune: --rounds '$rounds' is not a count in 1..99" >&2; exit 1; }
if [ $study -eq 0 ] && [ ! -f "$out/cluster_lab.profile.json" ]; then
  echo "lab-tune: --check-only needs --out DIR holding an earlier run's cluster_lab.profile.json" >&2
  exit 1
fi
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
# The machine's own speed as the run goes on: one process's topk:0.01 encode of 16M floats and its
# copy rate (a shared VM's CPU can drift by tens of percent over a run; the table reports it).
canary() {
  "$build/bin/ciuic-bench" compress --codec topk:0.01 --sizes 16M --data normal --format json \
    --out "$out/canary-\$1.json" >/dev/null 2>&1 || echo "lab-tune: the canary failed (\$1)" >&2
}
rm -f "$out"/canary-*.json
canary 0-before-study
if [ $study -eq 1 ]; then
  echo "lab-tune: run --mode measure" >&2
  "$build/bin/ciuic-tune" run --topology cluster_lab --mode measure --budget $budget --workload "$workload" \\
    --gate-seeds 1 --db "$db" --out "$profile" >"$out/study.log" 2>&1
fi
canary 1-after-study
rm -f "$out"/profile_run*.json "$out"/baseline_run*.json
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
print(",".join(out))' "$profile" "\$1"
}
for run in \$(seq 1 $rounds); do
  canary "2-round\$(printf %02d \$run)"
  for part in tiny mid big; do
    s=\$(sizes \$part)
    [ -n "\$s" ] || continue
    case \$part in tiny) it="-n 40 -w 5" ;; mid) it="-n 7 -w 2" ;; *) it="-n 3 -w 1" ;; esac
    # Odd rounds the profile first, even rounds the baseline first (as the study's pairs): a drift of
    # the machine favours neither.
    order="profile baseline"
    [ \$((run % 2)) -eq 1 ] || order="baseline profile"
    echo "lab-tune: run \$run: \${order% *} then \${order#* } at \$s" >&2
    for side in \$order; do
      if [ \$side = profile ]; then
        "$build/bin/ciuic-bench" allreduce --backend ciuic --profile "$profile" --ranks 4 --sizes "\$s" --inplace yes \
          \$it --format json --out "$out/profile_run\$run-\$part.json" >/dev/null
      else
        "$build/bin/ciuic-bench" allreduce --backend ciuic --algo native --bucket 25M --ranks 4 --sizes "\$s" \
          --inplace yes \$it --format json --out "$out/baseline_run\$run-\$part.json" >/dev/null
      fi
    done
  done
done
EOF
chmod +x "$out/tune.sh"
scripts/cluster-lab.sh --hosts 2 --ranks-per-host 2 --rate "$rate" --run -- "$out/tune.sh"
rm -f "$out/tune.sh"  # generated with this machine's paths: not a result (kept when the run failed)

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, math, os, sys
out = sys.argv[1]
prof = json.load(open(os.path.join(out, "cluster_lab.profile.json")))
def times(name, run):
    t = {}
    for path in glob.glob(os.path.join(out, f"{name}_run{run}-*.json")):
        for r in json.load(open(path))["results"]:
            if r.get("time_us"): t[r["size_bytes"]] = r.get("time_p50_us") or r.get("time_us")
    return t
runs = []
while os.path.exists(os.path.join(out, f"profile_run{len(runs) + 1}-tiny.json")) or \
        os.path.exists(os.path.join(out, f"profile_run{len(runs) + 1}-mid.json")):
    runs.append((times("profile", len(runs) + 1), times("baseline", len(runs) + 1)))
def fs(x):
    for u, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= f: return f"{x / f:.3g}{u}"
    return str(int(x))
def ms(v): return f"{v / 1e3:.2f}" if v and v > 0 else "-"
pv, step = prof["provenance"], prof["step"]
print(f"# cluster_lab (2 hosts x 2 ranks): study {pv['study_id']} ({pv['mode']}, {pv['strategy']}, "
      f"budget {pv['budget']}), commit {pv['git_commit']}")
print(f"# step: predicted {step['predicted_us'] / 1e3:.1f} ms vs baseline {step['baseline_us'] / 1e3:.1f} ms "
      f"({step['baseline_us'] / step['predicted_us']:.2f}x predicted)")
print("# baseline: the library's allreduce (MPI) in 25 MiB buckets; predicted speed-up: the study's baseline over")
print(f"# its rule, both measured at the band's size (its median pair); now: {len(runs)} round(s), the profile and the")
print("# baseline in turn (odd rounds the profile first);")
print("# measured / predicted: the median round's; medians: the baseline's median time over the profile's\n")
print("| band | size | rule | model ms | study: rule ms | study: baseline ms | predicted speed-up "
      "| profile now ms | baseline now ms | measured speed-up per round | median | measured / predicted "
      "| medians | medians / predicted |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in prof["rules"]:
    lo, hi = r["min_bytes"], r.get("max_bytes") or 0
    size = int((math.sqrt(max(lo, 4096) * hi) if hi else 4.0 * lo) / 4) * 4
    rule = f"{r['algo']} {r['codec']}" + (f" {r['precision']}" if r.get("precision", "fp32") != "fp32" else "")
    rule += f", bucket {'whole' if r['bucket_bytes'] >= size else fs(r['bucket_bytes'])}"
    if r["algo"] != "nccl": rule += f", {r['streams']} stream(s)"
    pred, meas, base = r.get("predicted_us"), r.get("measured_us"), r.get("baseline_us")
    want = base / meas if meas and base else None
    got = [b.get(size) / p.get(size) if p.get(size) and b.get(size) else None for p, b in runs]
    cells = [f"[{fs(lo)}, {fs(hi) if hi else 'inf'})", fs(size), rule, ms(pred), ms(meas), ms(base),
             f"{want:.2f}x" if want else "-",
             " / ".join(ms(p.get(size)) for p, _ in runs), " / ".join(ms(b.get(size)) for _, b in runs),
             " / ".join(f"{g:.2f}x" if g else "-" for g in got)]
    def median(xs):
        xs = sorted(x for x in xs if x)
        return (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2) if xs else None
    med = median(got)
    pm, bm = median(p.get(size) for p, _ in runs), median(b.get(size) for _, b in runs)
    both = bm / pm if pm and bm else None
    cells += [f"{med:.2f}x" if med else "-", f"{med / want:.2f}" if med and want else "-",
              f"{both:.2f}x" if both else "-", f"{both / want:.2f}" if both and want else "-"]
    print("| " + " | ".join(cells) + " |")
canaries = sorted(glob.glob(os.path.join(out, "canary-*.json")))
if canaries:
    print("\n# the machine: one process's topk:0.01 encode of 16M floats (us) and copy rate (GB/s), as the run went on")
    for path in canaries:
        r = json.load(open(path))["results"][0]
        print(f"#   {os.path.basename(path)[7:-5]:<16} encode {r['enc_us']:9.1f} us   copy {r['copy_gbps']:6.2f} GB/s")
PY
echo "lab-tune: results in $out" >&2
