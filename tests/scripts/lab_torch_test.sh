#!/usr/bin/env bash
# A torch job across the multi-host lab (scripts/cluster-lab.sh --torch): 2 hosts x 1 rank behind a
# 1 Gbit/s link, torchrun's variables per rank, scripts/train_tta.py for 20 steps with DDP's default
# hook and ciuic's int8 hook. The summary must name both hosts and both configurations must learn.
#   tests/scripts/lab_torch_test.sh BUILD/lib/libciuic.so
# Exit 77 (skipped) without root, ip/tc/unshare/mpiexec or Debian's torch.
set -uo pipefail
lib=${1:?usage: lab_torch_test.sh LIBCIUIC}
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "$(id -u)" -ne 0 ]; then echo "lab torch test: skipped (needs root)"; exit 77; fi
for t in ip tc unshare mpiexec; do
  command -v "$t" >/dev/null || { echo "lab torch test: skipped ($t missing)"; exit 77; }
done
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "lab torch test: skipped (no torch under /usr/bin/python3)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/scripts/cluster-lab.sh" --hosts 2 --ranks-per-host 1 --rate 1gbit --torch -- \
  env CIUIC_LIBRARY="$lib" PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 "$root/scripts/train_tta.py" --configs ddp,codec:int8 --seeds 1 --steps 20 --eval-every 10 \
  --out "$work/out" >"$work/log" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail -30 "$work/log"; echo "FAIL: the lab's torch job exited $rc"; exit 1; }
/usr/bin/python3 - "$work/out/train_tta.json" <<'PY' || { tail -30 "$work/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
hosts = s["rank_hosts"]
if sorted(hosts) != ["labhost0", "labhost1"]:
    sys.exit(f"FAIL: the ranks ran on {hosts}, not on labhost0 and labhost1")
if s["world"] != 2 or set(s["rows"]) != {"ddp", "codec:int8"}:
    sys.exit(f"FAIL: world {s['world']}, configurations {sorted(s['rows'])}")
for name, row in s["rows"].items():
    if not row["final"][0] < 6.0:
        sys.exit(f"FAIL: {name} did not learn (final {row['final'][0]:.3f} bpc of 8)")
print(f"lab torch test: ranks on {hosts}; " +
      "; ".join(f"{n} {r['step_ms'][0]:.0f} ms/step, {r['final'][0]:.3f} bpc" for n, r in s["rows"].items()))
PY
# --torch and --run exclude each other: one line, exit 1, no lab made.
out=$("$root/scripts/cluster-lab.sh" --torch --run -- true 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s' "$out" | grep -q -- "--run and --torch" ||
  { echo "FAIL: --torch --run: exit $rc, said: $out"; exit 1; }
ip netns list | grep -q 'ciuic-lab-' && { echo "FAIL: a lab namespace is left"; exit 1; }
echo "lab torch test: passed"
