#!/usr/bin/env bash
# The ring (its reduce-scatter's last step fused with its allgather's first) against the build before
# and the same round's sendrecv; 2 ranks over MPI, 64 MiB-1 GiB, rounds alternate the builds.
# Usage: run.sh BEFORE_BENCH AFTER_BENCH OUT_DIR [ROUNDS]
set -eu
before=$1 after=$2 out=$3 rounds=${4:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--ranks 2 --sizes 64M,256M,1G --iters 20 --warmup 2)
for round in $(seq 1 "$rounds"); do
  "$after" sendrecv --backend mpi "${common[@]}" > "$out/sendrecv-round$round.txt" 2>&1
  "$before" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-before-round$round.txt" 2>&1
  "$after" allreduce --backend ciuic --algo ring "${common[@]}" > "$out/ring-after-round$round.txt" 2>&1
done
