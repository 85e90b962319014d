#!/usr/bin/env bash
# Fresh machine to a first result: installs, builds, runs the main job (allreduce 1K..1G on two
# local MPI ranks, or one rank per GPU where there are GPUs), and says where the results went.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
json="results/quickstart-$stamp.json"
build/bin/ciuic-bench allreduce --sizes 1K:1G --ranks 2 --format json --out "$json" --db results/ciuic.db
echo
echo "quickstart: table above; JSON in $json; run appended to results/ciuic.db (table bench_runs/bench_rows)"
