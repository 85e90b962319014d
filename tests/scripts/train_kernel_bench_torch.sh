#!/usr/bin/env bash
# unit.train_kernel_bench_torch: ciuic-bench kernel fills PyTorch's eager rows where /usr/bin/python3
# imports torch; exit 77 (skipped) where it does not.
set -euo pipefail
bench=${1:?usage: train_kernel_bench_torch.sh CIUIC_BENCH}
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "torch not importable by /usr/bin/python3: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bench" kernel add-ln --shape 64x128 --iters 2 --format csv --out "$dir/torch.csv" >/dev/null
n=$(grep -c ',torch-eager,[0-9]' "$dir/torch.csv" || true)
echo "$n torch-eager rows timed (want 2)"
[[ $n -eq 2 ]]
