#!/usr/bin/env bash
# Small-message allreduce latency of ciuic-bench next to OSU's osu_allreduce, both over Open MPI on
# this machine, run back to back (OSU first, then ciuic-bench, then both again) so each ratio has
# both sides from the same minutes. OSU is not part of ciuic: pass a checkout or a git mirror of the
# OSU micro-benchmarks (5.x layout, mpi/collective/osu_allreduce.c); it is built in a temporary
# folder and removed afterwards.
#
# Usage: scripts/osu-compare.sh OSU_SOURCE [RANKS] [MAX_BYTES] [REPS]
#   OSU_SOURCE  a folder holding mpi/collective/, or a git directory (bare mirror) of one
#   REPS alternating runs of each (default 5; sub-microsecond latencies on a shared VM vary 20-50%
#   from run to run); prints per size the median over the runs of OSU's avg latency and of
#   ciuic-bench --average avg's time, their ratio, and the median ratio over sizes, then the same
#   for the first and second half of the runs (the repeat). Needs mpicc, mpiexec and
#   build/bin/ciuic-bench (scripts/build.sh); the Python part needs only the standard library.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/osu-compare.sh OSU_SOURCE [RANKS] [MAX_BYTES]}
ranks=${2:-2}
max=${3:-4096}
reps=${4:-5}
bench=build/bin/ciuic-bench
[ -x "$bench" ] || { echo "osu-compare: $bench not built (scripts/build.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -d "$src/mpi/collective" ]; then
  cp -r "$src/mpi/collective" "$work/"
elif git --git-dir="$src" rev-parse HEAD >/dev/null 2>&1; then
  git --git-dir="$src" archive HEAD mpi/collective | tar -x -C "$work"
  mv "$work/mpi/collective" "$work/collective"
else
  echo "osu-compare: $src holds no mpi/collective (OSU micro-benchmarks 5.x)" >&2
  exit 1
fi
mpicc -O2 -I"$work/collective" -o "$work/osu_allreduce" \
  "$work/collective/osu_allreduce.c" "$work/collective/osu_coll.c" -lm

for rep in $(seq 1 "$reps"); do
  # OSU: sizes 4 B..max doubling; 1000 iterations / 200 warm-up below 8 KiB; reports the average
  # over ranks of each rank's mean latency.
  mpiexec -n "$ranks" "$work/osu_allreduce" -m "$max" > "$work/osu.$rep.txt"
  "$bench" allreduce --backend mpi --ranks "$ranks" --sizes "8:$max" --inplace no --average avg \
    --format csv > "$work/ciuic.$rep.csv" 2>/dev/null
done
python3 - "$work" "$reps" "$ranks" <<'PY'
import csv, statistics, sys
work, reps, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
osu, ours = {}, {}
for rep in range(1, reps + 1):
    for line in open(f"{work}/osu.{rep}.txt"):
        f = line.split()
        if len(f) >= 2 and f[0].isdigit():
            osu.setdefault(int(f[0]), []).append(float(f[1]))
    for r in csv.DictReader(open(f"{work}/ciuic.{rep}.csv")):
        if r["time_us"]:
            ours.setdefault(int(r["size_bytes"]), []).append(float(r["time_us"]))
sizes = sorted(s for s in ours if s in osu)
def table(lo, hi, title):
    print(f"# {title}: allreduce fp32 sum, {ranks} ranks, out-of-place, average over ranks; "
          f"median of runs {lo + 1}..{hi}")
    print(f"{'size':>8} {'osu_us':>9} {'ciuic_us':>9} {'ciuic/osu':>9}")
    ratios = []
    for s in sizes:
        a, b = statistics.median(osu[s][lo:hi]), statistics.median(ours[s][lo:hi])
        ratios.append(b / a)
        print(f"{s:>8} {a:9.2f} {b:9.2f} {ratios[-1]:9.3f}")
    print(f"median ciuic/osu: {statistics.median(ratios):.3f} over {len(ratios)} sizes")
table(0, reps, "all runs")
if reps >= 4:
    table(0, reps // 2, "first half")
    table(reps // 2, reps, "second half")
PY
