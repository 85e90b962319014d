#!/usr/bin/env bash
# Auto's crossover table on 2 ranks with and without registered buffers (--register yes), 3 alternating
# rounds; then the sweep (out of place) of auto on registered buffers against MPI's allreduce, same
# rounds. From the project root, on a quiet machine, after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/2026-11-29-auto-registered/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sizes=4K:1G:x4
for round in 1 2 3; do
  for reg in yes no; do
    build/bin/ciuic-bench allreduce --backend ciuic --ranks 2 --register "$reg" --crossover measure --crossover-table \
      --sizes "$sizes" >"$out/table-$reg-$round.txt" 2>"$out/table-$reg-$round.err"
  done
  build/bin/ciuic-bench allreduce --backend ciuic --ranks 2 --register yes --crossover measure --sizes 64M:1G:x4 \
    --inplace no --iters 10 --warmup 2 >"$out/sweep-auto-registered-$round.txt" 2>"$out/sweep-auto-registered-$round.err"
  build/bin/ciuic-bench allreduce --backend mpi --ranks 2 --sizes 64M:1G:x4 --inplace no --iters 10 --warmup 2 \
    >"$out/sweep-mpi-$round.txt" 2>"$out/sweep-mpi-$round.err"
done
