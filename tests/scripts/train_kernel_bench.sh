#!/usr/bin/env bash
# unit.train_kernel_bench: ciuic-bench kernel over the training kernels (see tests/CMakeLists.txt).
set -euo pipefail
bench=${1:?usage: train_kernel_bench.sh CIUIC_BENCH}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Every kernel in every dtype, ours only: 7 kernels x 3 dtypes x 7 rows (copy + 3 per pass).
"$bench" kernel all-training --shape 70x300 --dtype fp32,fp16,bf16 --iters 2 --torch no --format csv --out "$dir/ours.csv" \
  >/dev/null
/usr/bin/env python3 - "$dir/ours.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
ours = [r for r in rows if r["variant"] in ("copy", "fused", "unfused")]
untimed = [r for r in ours if not r["time_us"] or float(r["time_us"]) <= 0]
diff = [r for r in rows if r["variant"] == "unfused" and r["dtype"] == "fp32" and float(r["diff"]) != 0]
print(len(rows), "rows,", len(untimed), "untimed,", len(diff), "fp32 fused/unfused differences")
sys.exit(1 if untimed or diff or len(rows) != 7 * 3 * 7 else 0)
PY
# The default shapes are the shipped transformer workloads' hidden sizes (profiles/workloads), each once.
src=$(cd "$(dirname "$0")/../.." && pwd)
defaults=$("$bench" kernel add-ln --help | tr -d ' \n' | sed -n 's/.*TOKENSxHIDDEN,oracommalist(default:\([0-9x,]*\)).*/\1/p')
/usr/bin/env python3 - "$defaults" "$src"/profiles/workloads/*.json <<'PY'
import json, sys
shipped = sorted({json.load(open(f))["transformer"]["hidden"] for f in sys.argv[2:] if "transformer" in json.load(open(f))})
hidden = sorted(int(s.split("x")[1]) for s in sys.argv[1].split(","))
print("default hidden sizes", hidden, "workloads'", shipped)
sys.exit(0 if shipped and hidden == shipped else 1)
PY
# A bad shape: exit 1, one line on stderr.
rc=0
"$bench" kernel add-ln --shape 0x5 2>"$dir/err.txt" || rc=$?
[[ $rc -eq 1 && $(wc -l <"$dir/err.txt") -eq 1 ]]
echo "ok"
