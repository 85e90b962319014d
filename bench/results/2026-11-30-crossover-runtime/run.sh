#!/bin/bash
# Issue 30, item 1: the crossover table with its runtime column (the allreduce --backend ciuic calls),
# 2 ranks, both placements, the built-in one-host table, ROUNDS runs one after another.
# Usage (root, quiet machine): run.sh CIUIC_BENCH OUTDIR ROUNDS
set -eu
bench=$1 out=$2 rounds=${3:-3}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  "$bench" allreduce --backend ciuic --ranks 2 --crossover-table --crossover-rounds 3 \
    --sizes 4,64,1K,4K,64K,1M,4M,8M,16M,32M,64M > "$out/table-r$r.txt" 2> "$out/table-r$r.err"
done
