#!/usr/bin/env bash
# unit.train_kernel_bench_torch: ciuic-bench kernel fills PyTorch's eager rows where /usr/bin/python3
# imports torch (one `python3 -m ciuic.kernel_bench --serve` answers every row of a run); a server that
# answers a bad request with an error line goes on serving; a Python that cannot start leaves the rows
# empty with the reason noted, and the run still succeeds. Exit 77 (skipped) where torch is missing.
set -euo pipefail
bench=${1:?usage: train_kernel_bench_torch.sh CIUIC_BENCH}
src=$(cd "$(dirname "$0")/../.." && pwd)
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "torch not importable by /usr/bin/python3: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
"$bench" kernel add-ln --shape 64x128 --iters 2 --format csv --out "$dir/torch.csv" >/dev/null
n=$(grep -c ',torch-eager,[0-9]' "$dir/torch.csv" || true)
echo "add-ln: $n torch-eager rows timed (want 2)"
[[ $n -eq 2 ]] || fail=1

# Every row of a many-row run, from one server.
"$bench" kernel all-training --shape 32x64,16x128 --dtype fp32,bf16 --iters 2 --format csv --out "$dir/all.csv" >/dev/null
n=$(grep -c ',torch-eager,[0-9]' "$dir/all.csv" || true)
echo "all-training: $n torch-eager rows timed (want 56: 7 kernels x 2 shapes x 2 dtypes x 2 passes)"
[[ $n -eq 56 ]] || fail=1

# The server itself: a bad request is answered and the next one still served.
printf '%s\n' '{"argv": ["--name", "nope"]}' 'not json' \
  '{"argv": ["--name", "bias-gelu", "--act", "relu", "--shape", "8x16", "--dtype", "fp32", "--device", "cpu", "--iters", "1"]}' |
  PYTHONPATH="$src/python" /usr/bin/python3 -m ciuic.kernel_bench --serve > "$dir/serve.txt"
errors=$(grep -c '^{"error": "ciuic.kernel_bench: ' "$dir/serve.txt" || true)
timed=$(grep -c '"forward_us": [0-9]' "$dir/serve.txt" || true)
echo "--serve: $errors error answers (want 2), $timed timed (want 1)"
[[ $errors -eq 2 && $timed -eq 1 ]] || { cat "$dir/serve.txt"; fail=1; }

# A Python that cannot start: rows empty, the reason noted, exit 0. Fifty runs (0.04 s each): the
# failed exec is found by the request's write (the child already gone: 2 runs in 20 said "it stopped
# reading" before that path looked at the exit status) or by the answer's read; both must say so.
for run in $(seq 1 50); do
  CIUIC_PYTHON=/nonexistent/python3 "$bench" kernel add-ln --shape 64x128 --iters 2 > "$dir/none.txt"
  grep -q "^# torch-eager: could not start /nonexistent/python3" "$dir/none.txt" ||
    { echo "run $run: no 'could not start' note"; tail -n 3 "$dir/none.txt"; fail=1; }
done
exit $fail
