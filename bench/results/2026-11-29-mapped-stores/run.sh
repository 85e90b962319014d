#!/usr/bin/env bash
# The ring over shared windows in place: streaming stores above 256 KiB (the build before, a copy of
# its ciuic-bench given as $1) against ordinary stores at every size (build/, this change). Auto's
# crossover table on registered buffers from each build (in place; its ring column is the ring over
# the windows), then MPI's allreduce on ordinary buffers, then the ring alone at 1 GiB from each build,
# 3 alternating rounds on 2 ranks. From the
# project root, on a quiet machine, after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
old=${1:?usage: run.sh PATH-TO-THE-PREVIOUS-CIUIC-BENCH}
out=bench/results/2026-11-29-mapped-stores/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
table=(allreduce --backend ciuic --ranks 2 --register yes --crossover measure --crossover-table --sizes 4K:256M:x4)
for round in 1 2 3; do
  "$old" "${table[@]}" >"$out/table-streaming-$round.txt" 2>"$out/table-streaming-$round.err"
  build/bin/ciuic-bench "${table[@]}" >"$out/table-ordinary-$round.txt" 2>"$out/table-ordinary-$round.err"
  build/bin/ciuic-bench allreduce --backend mpi --ranks 2 --inplace yes --sizes 4K:256M:x4 >"$out/mpi-$round.txt" 2>&1
  for b in streaming ordinary; do
    bin=build/bin/ciuic-bench
    [[ $b == streaming ]] && bin=$old
    "$bin" allreduce --backend ciuic --algo ring --register yes --ranks 2 --inplace yes --sizes 1G --iters 10 --warmup 2 \
      >"$out/ring-1g-$b-$round.txt" 2>&1
  done
done
