#!/bin/bash
# Issue 30, item 1, the large end: run.sh's table at 128 MiB - 1 GiB (its runtime column had stopped at
# 64 MiB), 2 ranks, both placements, ROUNDS runs one after another.
# Usage (root, quiet machine): run-large.sh CIUIC_BENCH OUTDIR ROUNDS
set -eu
bench=$1 out=$2 rounds=${3:-3}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  "$bench" allreduce --backend ciuic --ranks 2 --crossover-table --crossover-rounds 3 \
    --sizes 128M,256M,512M,1G > "$out/table-large-r$r.txt" 2> "$out/table-large-r$r.err"
done
