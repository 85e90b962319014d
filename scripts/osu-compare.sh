#!/usr/bin/env bash
# Small-message allreduce latency of ciuic-bench next to OSU's osu_allreduce, both over Open MPI on
# this machine, run back to back (OSU first, then ciuic-bench, then both again) so each ratio has
# both sides from the same minutes. OSU is not part of ciuic: pass a checkout or a git mirror of the
# OSU micro-benchmarks (5.x layout, mpi/collective/osu_allreduce.c); it is built in a temporary
# folder and removed afterwards.
#
# Usage: scripts/osu-compare.sh OSU_SOURCE [RANKS] [MAX_BYTES]
#   OSU_SOURCE  a folder holding mpi/collective/, or a git directory (bare mirror) of one
#   prints per size: OSU avg latency, ciuic-bench --average avg time, their ratio; then the median
#   ratio per repetition. Needs mpicc, mpiexec and build/bin/ciuic-bench (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/osu-compare.sh OSU_SOURCE [RANKS] [MAX_BYTES]}
ranks=${2:-2}
max=${3:-4096}
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

for rep in 1 2; do
  # OSU: sizes 4 B..max doubling; 1000 iterations / 200 warm-up below 8 KiB; reports the average
  # over ranks of each rank's mean latency.
  mpiexec -n "$ranks" "$work/osu_allreduce" -m "$max" > "$work/osu.$rep.txt"
  "$bench" allreduce --backend mpi --ranks "$ranks" --sizes "8:$max" --inplace no --average avg \
    --format csv > "$work/ciuic.$rep.csv"
  /usr/bin/env python3 - "$work/osu.$rep.txt" "$work/ciuic.$rep.csv" "$rep" <<'PY'
import csv, statistics, sys
osu = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 2 and f[0].isdigit():
        osu[int(f[0])] = float(f[1])
rows = [r for r in csv.DictReader(open(sys.argv[2])) if r["time_us"]]
print(f"# repetition {sys.argv[3]}: allreduce fp32 sum, out-of-place, average over ranks")
print(f"{'size':>8} {'osu_us':>9} {'ciuic_us':>9} {'ciuic/osu':>9}")
ratios = []
for r in rows:
    size = int(r["size_bytes"])
    if size not in osu:
        continue
    ours = float(r["time_us"])
    ratios.append(ours / osu[size])
    print(f"{size:>8} {osu[size]:9.2f} {ours:9.2f} {ratios[-1]:9.3f}")
print(f"median ciuic/osu: {statistics.median(ratios):.3f} over {len(ratios)} sizes")
PY
done
