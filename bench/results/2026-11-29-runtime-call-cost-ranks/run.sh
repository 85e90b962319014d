#!/bin/bash
# Issue 30, item 2 on 2 ranks: ciuic::Runtime's cost per 8 B / 1 KiB call with its safety on, against
# the transport's own MPI_Allreduce, before (the agreement and the call: two exchanges) and after
# (a small native call inside the agreement: one), alternating builds, each benchmark 3 times per run.
# Usage (root, quiet machine): run.sh BEFORE_MICRO AFTER_MICRO OUTDIR ROUNDS
set -u
before=$1 after=$2 out=$3 rounds=${4:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    bin=$before
    [ $side = after ] && bin=$after
    mpiexec -n 2 --bind-to core "$bin" --benchmark_filter=Overhead --benchmark_format=csv > "$out/$side-r$r.csv" 2> "$out/$side-r$r.err"
  done
done
