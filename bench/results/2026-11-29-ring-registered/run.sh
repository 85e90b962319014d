#!/bin/bash
# Issue 30, item 3: the out-of-place ring against the same round's MPI sendrecv, with the buffers
# registered (shared windows) and without, under both shared-memory huge-page settings.
# Usage (root, quiet machine): run.sh BENCH OUTDIR ROUNDS. Restores shmem_enabled afterwards.
set -u
bench=$1 out=$2 rounds=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
knob=/sys/kernel/mm/transparent_hugepage/shmem_enabled
was=$(sed 's/.*\[\(.*\)\].*/\1/' $knob)
trap 'echo $was > $knob' EXIT
mkdir -p "$out"
common="--ranks 2 --sizes 64M,256M,1G --iters 10 --warmup 2"
for mode in never advise; do
  echo $mode > $knob
  for r in $(seq 1 $rounds); do
    $bench sendrecv --backend mpi $common --inplace no > "$out/$mode-r$r-sendrecv.txt" 2>&1
    $bench allreduce --backend ciuic --algo ring $common > "$out/$mode-r$r-ring.txt" 2>&1
    $bench allreduce --backend ciuic --algo ring --register yes $common > "$out/$mode-r$r-ring-registered.txt" 2>&1
  done
done
