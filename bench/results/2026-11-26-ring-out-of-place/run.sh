#!/usr/bin/env bash
# The out-of-place ring against the same run's sendrecv, before (494f073: copy, then the in-place
# ring) and after (the reduce-scatter reads the source directly), 2 ranks over MPI, 64 MiB-1 GiB;
# two rounds, the builds alternating. Usage: run.sh BEFORE_BENCH AFTER_BENCH OUT_DIR
set -eu
before=$1 after=$2 out=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--ranks 2 --sizes 64M,256M,1G --iters 5 --warmup 1)
for round in 1 2; do
  "$after" sendrecv --backend mpi "${common[@]}" > "$out/sendrecv-round$round.txt" 2>&1
  "$before" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-before-round$round.txt" 2>&1
  "$after" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-after-round$round.txt" 2>&1
  "$after" allreduce --backend mpi "${common[@]}" > "$out/mpi-round$round.txt" 2>&1
done
