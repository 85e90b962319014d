#!/bin/bash
# Issue 34: the training kernels on this CPU, fused vs our unfused sequence vs PyTorch's eager sequence
# (2 threads each), at the shipped workloads' hidden sizes: the commands of 2026-11-27-train-kernels-cpu
# on today's kernels, two runs one after the other, then fp16 at 4096x1024.
# Usage (root, quiet machine, /usr/bin/python3 with torch): run.sh CIUIC_BENCH OUTDIR
set -eu
bench=$1 out=$2
mkdir -p "$out"
for run in 1 2; do
  for k in ln-dropout-gelu bias-gelu add-ln; do
    "$bench" kernel $k --shape 4096x1024,4096x1600,4096x4096 --dtype fp32,bf16 \
      --format csv --out "$out/$k-run$run.csv" > "$out/$k-run$run.txt" 2>&1
  done
done
"$bench" kernel all-training --shape 4096x1024 --dtype fp16 --format csv --out "$out/all-fp16.csv" > "$out/all-fp16.txt" 2>&1
