#!/bin/bash
# Issue 30, item 2b: where the runtime's fixed cost per 8 B call goes, by instruction counts (callgrind,
# valgrind 3.19), one rank (the transport is the thread backend's own allreduce). Instruction counts do
# not depend on the machine's load. Usage: run.sh CIUIC_MICRO OUTDIR
set -eu
micro=$1 out=$2
mkdir -p "$out"
for b in Runtime RuntimeBare Transport; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$b" --toggle-collect='*RuntimeCall*' \
    --toggle-collect='*Transport(benchmark*' "$micro" --benchmark_filter="Overhead/$b/8\$" --benchmark_min_time=0.2
  callgrind_annotate --inclusive=yes "$out/cg.$b" | grep -E '^\s*[0-9,]+ \(' | head -40 | cut -c1-220 \
    > "$out/$b.inclusive.txt"
done
