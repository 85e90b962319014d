#!/usr/bin/env bash
# For the record (3 and 4 ranks are oversubscribed on the VM's 2 cores: reported, not judged): auto's
# crossover table on registered buffers and without them, 3 alternating rounds. From the project root
# after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/2026-11-29-mapped-stores/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for round in 1 2 3; do
  for ranks in 3 4; do
    for reg in yes no; do
      build/bin/ciuic-bench allreduce --backend ciuic --ranks "$ranks" --register "$reg" --crossover measure \
        --crossover-table --sizes 4K:64M:x4 >"$out/ranks$ranks-table-$reg-$round.txt" 2>"$out/ranks$ranks-table-$reg-$round.err"
    done
  done
done
