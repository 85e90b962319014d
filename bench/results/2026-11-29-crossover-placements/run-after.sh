#!/bin/bash
# After c9b9b4c (out-of-place bands): the built-in one-host table and a measured one, 1 KiB to 64 MiB,
# in place and out of place, two alternating runs each; 3 and 4 ranks (built-in) for the record.
# Usage (root, quiet machine): run-after.sh BENCH OUTDIR
set -u
bench=$1 out=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
t="allreduce --backend ciuic --crossover-table --crossover-rounds 3 --sizes 1K:64M:x4"
for round in 1 2; do
  $bench $t --ranks 2 --crossover builtin > "$out/after-r$round-2ranks-builtin.txt" 2>&1
  $bench $t --ranks 2 --crossover measure > "$out/after-r$round-2ranks-measured.txt" 2>&1
done
$bench $t --ranks 3 --crossover builtin > "$out/after-3ranks-builtin.txt" 2>&1
$bench $t --ranks 4 --crossover builtin > "$out/after-4ranks-builtin.txt" 2>&1
