#!/usr/bin/env bash
# Auto over the built-in table, 2 ranks over MPI: this build's one-host table (native <2K, the staged
# ring <512K, native <8M, ring) against the build before's (native <8M, ring; a copy of its ciuic-bench
# given as $1), each in a crossover table (--crossover builtin: its auto column runs that table),
# 3 alternating rounds. From the project root, on a quiet machine, after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
old=${1:?usage: run-builtin.sh PATH-TO-THE-PREVIOUS-CIUIC-BENCH}
out=bench/results/2026-11-29-staged-ring/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
table=(allreduce --backend ciuic --ranks 2 --crossover builtin --crossover-table --sizes 1K:16M:x4)
for round in 1 2 3; do
  "$old" "${table[@]}" >"$out/builtin-before-$round.txt" 2>"$out/builtin-before-$round.err"
  build/bin/ciuic-bench "${table[@]}" >"$out/builtin-one-host-$round.txt" 2>"$out/builtin-one-host-$round.err"
done
