#!/usr/bin/env bash
# Hierarchy over a real slow link: in one multi-host lab (scripts/cluster-lab.sh, HOSTS x RPH ranks,
# each host's link shaped to RATE) times MPI's allreduce, Gloo's allreduce algorithms when built, the
# flat ciuic ring, hier uncompressed and hier with each CODEC on the inter-host step, all on the same
# sizes in one run; then the codecs' kernel speeds here on the inter-host chunk. Writes
# OUT/<config>.json, OUT/codecs.txt and OUT/table.md (time per size, speed-up over MPI and over hier
# uncompressed, the error). --hosts 1 is the same runs on one host (shared memory, no link).
#   scripts/lab-hier.sh [--rate 1gbit] [--hosts 2] [--ranks-per-host 2] [--sizes 16M,64M] [--iters 5]
#     [--gloo-algos ring,ring-chunked,halving-doubling,bcube] [--out DIR] [CODEC...]  (codecs: int8 sign1 topk:0.01)
# Needs root and a build in build/ (or $CIUIC_BUILD).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit hosts=2 rph=2 sizes=16M,64M iters=5 out="" gloo_algos=ring,ring-chunked,halving-doubling,bcube
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --gloo-algos) gloo_algos=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "lab-hier: unknown option '$1' (see --help)" >&2; exit 1 ;;
    *) break ;;
  esac
done
codecs=("$@")
[ ${#codecs[@]} -gt 0 ] || codecs=(int8 sign1 topk:0.01)
build=${CIUIC_BUILD:-build}
bench=$(cd "$build/bin" && pwd)/ciuic-bench
[ -x "$bench" ] || { echo "lab-hier: $bench is missing (scripts/build.sh)" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d /tmp/lab-hier.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
ranks=$((hosts * rph))

# The runs, in the order they execute inside the lab: NAME|ARGS.
runs=("mpi|--backend mpi")
# Gloo's allreduce algorithms when it is built: what a PyTorch CPU job's allreduce runs.
if "$bench" list | grep -q '^backends:.*gloo'; then
  for a in ${gloo_algos//,/ }; do runs+=("gloo-$a|--backend gloo --algo $a"); done
fi
runs+=("ring|--backend ciuic --algo ring" "hier|--backend ciuic --algo hier")
for c in "${codecs[@]}"; do runs+=("hier-$(echo "$c" | tr ':' '_')|--backend ciuic --algo hier --codec $c"); done
script="$out/runs.sh"
{
  echo "#!/bin/sh"
  echo "set -e"
  for r in "${runs[@]}"; do
    name=${r%%|*} args=${r#*|}
    echo "echo \"lab-hier: $name\" >&2"
    echo "\"$bench\" allreduce $args --ranks $ranks --sizes $sizes -n $iters -w 1 -c 1 --format json --out \"$out/$name.json\" >/dev/null"
  done
} >"$script"
chmod +x "$script"
scripts/cluster-lab.sh --hosts "$hosts" --ranks-per-host "$rph" --rate "$rate" --run -- "$script"

# Codec kernel speeds on one inter-host chunk (size / ranks-per-host), outside the lab, same machine.
{
  for c in "${codecs[@]}"; do
    IFS=, read -ra ss <<<"$sizes"
    for s in "${ss[@]}"; do
      bytes=$(python3 -c 'import sys; s = sys.argv[1]; f = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
print(int(s[:-1]) * f[s[-1]] if s[-1] in f else int(s))' "$s")
      "$bench" compress --codec "$c" --device cpu --sizes $((bytes / rph)) 2>&1 | grep -v '^#' | sed "s/^/$c /" || true
    done
  done
} >"$out/codecs.txt"

python3 - "$out" "$rate" "$hosts" "$rph" "${runs[@]}" <<'PY' | tee "$out/table.md"
import json, sys, os
out, rate, hosts, rph = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
names = [r.split("|", 1)[0] for r in sys.argv[5:]]
docs = {n: json.load(open(os.path.join(out, n + ".json"))) for n in names}
def rows(doc):
    return {r["size_bytes"]: r for r in doc["results"] if r.get("time_us") and not r.get("inplace")}
table = {n: rows(d) for n, d in docs.items()}
sizes = sorted(table["mpi"])
ctx = docs["mpi"]["context"]
print(f"# allreduce on the lab: {hosts} hosts x {rph} ranks, each host's link {rate}; "
      f"commit {ctx.get('git_commit', '?')}, {ctx.get('start_time', '?')}\n")
def fmt_size(b):
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= f and b % f == 0: return f"{b // f}{unit}"
    return str(b)
head = "| config | " + " | ".join(f"{fmt_size(s)} time ms (p50) | vs MPI | vs hier" for s in sizes) + " | rel_l2 |"
print(head)
print("|" + "---|" * (2 + 3 * len(sizes)))
for n in names:
    cells = []
    err = "-"
    for s in sizes:
        r = table[n].get(s)
        if not r:
            cells += ["n/a", "", ""]
            continue
        t = r.get("time_p50_us") or r["time_us"]
        m = table["mpi"][s].get("time_p50_us") or table["mpi"][s]["time_us"]
        h = table["hier"][s].get("time_p50_us") or table["hier"][s]["time_us"]
        cells += [f"{t / 1000:.1f}", f"{m / t:.2f}x", f"{h / t:.2f}x"]
        if r.get("rel_l2_error") is not None: err = f"{r['rel_l2_error']:.3g}"
    print(f"| {n} | " + " | ".join(cells) + f" | {err} |")
PY
echo "lab-hier: results in $out" >&2
