#!/usr/bin/env bash
# Fresh machine to a first result: installs, builds, runs the main job (allreduce 1K..1G on two
# local MPI ranks, or one rank per GPU where there are GPUs), then the bundled runtime (ciuic's ring)
# on the same sizes, and ends with one PNG of busbw vs size with both, and where everything went.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
json="results/quickstart-$stamp.json"
ring="results/quickstart-$stamp-ciuic-ring.json"
png="results/quickstart-$stamp.png"
echo "quickstart: 1/3 the library's own allreduce (MPI on CPU, NCCL on GPUs)"
build/bin/ciuic-bench allreduce --sizes 1K:1G --ranks 2 --format json --out "$json" --db results/ciuic.db
echo
echo "quickstart: 2/3 the same sizes through ciuic's runtime (its pipelined ring over the same transport)"
build/bin/ciuic-bench allreduce --backend ciuic --algo ring --sizes 1K:1G --ranks 2 --format json --out "$ring" \
  --db results/ciuic.db
echo
echo "quickstart: 3/3 the picture"
build/bin/ciuic-bench plot busbw "$json" "$ring" --out "$png" \
  --title "quickstart: the library's allreduce beside ciuic's ring"
echo
echo "quickstart: tables above; JSON in $json and $ring; both runs appended to results/ciuic.db"
echo "quickstart: busbw vs size, both runs: $png"
