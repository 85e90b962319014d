#!/bin/bash
# Issue 30, items 1 and 4: auto's crossover table on the current build, in place and out of place,
# 4 B to 1 GiB: 2 ranks with the built-in one-host table (what a user gets without a calibration) and
# with a table measured by the run itself; 3 and 4 ranks (oversubscribed on 2 cores) for the record.
# Each table is the median of 3 alternating rounds (--crossover-rounds 3) of every candidate.
# Usage (root, quiet machine): run.sh BENCH OUTDIR
set -u
bench=$1 out=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
t="allreduce --backend ciuic --crossover-table --crossover-rounds 3"
[ "${SKIP_TWO:-}" ] || for round in 1 2; do
  $bench $t --sizes 4:1G:x4 --ranks 2 --crossover builtin > "$out/r$round-2ranks-builtin.txt" 2>&1
  $bench $t --sizes 4:1G:x4 --ranks 2 --crossover measure > "$out/r$round-2ranks-measured.txt" 2>&1
done
$bench $t --ranks 3 --crossover builtin --sizes 4:256M:x4 > "$out/3ranks-builtin.txt" 2>&1
$bench $t --ranks 4 --crossover builtin --sizes 4:256M:x4 > "$out/4ranks-builtin.txt" 2>&1
