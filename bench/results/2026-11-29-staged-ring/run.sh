#!/usr/bin/env bash
# The uncompressed ring staged through the engine's own shared window up to 1 MiB (build/, this
# change) against the ring over the transport at every size (the build before, a copy of its
# ciuic-bench given as $1): auto's crossover table (in place; the library, native, rd and the ring
# per size, then auto over the table just measured) from each build, 3 alternating rounds on 2
# ranks over MPI; then this build's table on 3 and 4 ranks (oversubscribed: for the record). From
# the project root, on a quiet machine, after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
old=${1:?usage: run.sh PATH-TO-THE-PREVIOUS-CIUIC-BENCH}
out=bench/results/2026-11-29-staged-ring/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
table=(allreduce --backend ciuic --crossover measure --crossover-table --sizes 1K:16M:x4)
for round in 1 2 3; do
  "$old" "${table[@]}" --ranks 2 >"$out/table-transport-$round.txt" 2>"$out/table-transport-$round.err"
  build/bin/ciuic-bench "${table[@]}" --ranks 2 >"$out/table-staged-$round.txt" 2>"$out/table-staged-$round.err"
done
for ranks in 3 4; do
  for round in 1 2 3; do
    "$old" "${table[@]}" --ranks "$ranks" >"$out/ranks$ranks-table-transport-$round.txt" 2>"$out/ranks$ranks-table-transport-$round.err"
    build/bin/ciuic-bench "${table[@]}" --ranks "$ranks" >"$out/ranks$ranks-table-staged-$round.txt" \
      2>"$out/ranks$ranks-table-staged-$round.err"
  done
done
