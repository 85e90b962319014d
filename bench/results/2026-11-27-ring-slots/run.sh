#!/usr/bin/env bash
# The ring against the same run's sendrecv, before and after, 2 ranks over MPI, 64 MiB-1 GiB; rounds
# alternate the builds. Usage: run.sh BEFORE_BENCH AFTER_BENCH OUT_DIR [ROUNDS [ITERS [WARMUP]]]
# (defaults 3 5 1; 2026-11-27-ring-fused ran 5 20 2)
set -eu
before=$1 after=$2 out=$3 rounds=${4:-3} iters=${5:-5} warmup=${6:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--ranks 2 --sizes 64M,256M,1G --iters "$iters" --warmup "$warmup")
for round in $(seq 1 "$rounds"); do
  "$after" sendrecv --backend mpi "${common[@]}" > "$out/sendrecv-round$round.txt" 2>&1
  "$before" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-before-round$round.txt" 2>&1
  "$after" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-after-round$round.txt" 2>&1
done
