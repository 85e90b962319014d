#!/usr/bin/env bash
# Runs on the GPU machine from the repository root with build-device/bundle carried along:
#   scripts/device/gpu-check.sh LOGDIR
# Prints the GPU, finds NCCL in the Python wheel, runs the gpu tests, then the NCCL collective
# sweeps (allreduce fp32/bf16/fp8e4m3 1K:1G and the other collectives fp32), a device-to-device
# copy baseline, writes everything under LOGDIR, and prints a summary table last.
set -uo pipefail
logs=${1:?usage: gpu-check.sh LOGDIR}
mkdir -p "$logs"
bundle=build-device/bundle
py=${PYTHON:-python3}
nccl_dir=$($py -c "import importlib.util as u; s=u.find_spec('nvidia.nccl'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null)
cupti_dir=$($py -c "import importlib.util as u; s=u.find_spec('nvidia.cuda_cupti'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null)
export LD_LIBRARY_PATH="$bundle/lib:${nccl_dir:+$nccl_dir/lib:}${cupti_dir:+$cupti_dir/lib:}${LD_LIBRARY_PATH:-}"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "nccl wheel: ${nccl_dir:-none}"
  "$bundle/bin/ciuic-bench" list
} 2>&1 | tee "$logs/machine.txt"

"$bundle/bin/test_gpu" 2>&1 | tee "$logs/test_gpu.txt" | tail -n 5
tests_rc=${PIPESTATUS[0]}

summary="$logs/summary.txt"
# World size 1: busbw is 0 by definition, so the summary shows peak algbw (out-of-place is a copy).
printf '%-14s %-8s %12s %14s %8s %s\n' collective dtype "peak algbw" "at size" wrong exit > "$summary"
run() {  # collective dtype
  local name="$1-$2"
  "$bundle/bin/ciuic-bench" "$1" --backend nccl --device cuda --dtype "$2" --sizes 1K:1G \
    --format json --out "$logs/$name.json" > "$logs/$name.txt" 2>&1
  local rc=$?
  "$py" - "$logs/$name.json" "$1" "$2" "$rc" >> "$summary" <<'PY'
import json, sys
path, coll, dt, rc = sys.argv[1:]
try:
    s = json.load(open(path))["summary"]
    print(f"{coll:<14} {dt:<8} {s['peak_algbw_gbps']:12.1f} {s['peak_algbw_size_bytes']:14d} {s['total_wrong']:8d} {rc}")
except Exception as e:
    print(f"{coll:<14} {dt:<8} {'-':>12} {'-':>14} {'-':>8} {rc} ({e})")
PY
}
run allreduce fp32
if [[ ${SWEEPS:-1} != 0 ]]; then  # SWEEPS=0: allreduce fp32 only (the full set is in bench/results)
  for dt in bf16 fp8e4m3; do run allreduce "$dt"; done
  for c in allgather reducescatter broadcast reduce alltoall sendrecv; do run "$c" fp32; done
fi

# Device-to-device copy in the same session: the ceiling a world-size-1 collective is a copy of.
"$py" - > "$logs/d2d_copy.txt" 2>&1 <<'PY'
import torch
n = 1 << 30
a = torch.randn(n // 4, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
ts = []
for _ in range(20):
    ev[0].record(); b.copy_(a); ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]))
ts.sort(); ms = ts[len(ts) // 2]
print(f"d2d copy 1 GiB: median {ms*1000:.1f} us, {n/ms/1e6:.1f} GB/s one way, {2*n/ms/1e6:.1f} GB/s read+write")
PY
cat "$logs/d2d_copy.txt"
echo "gpu tests exit: $tests_rc"
cat "$summary"

# Codecs and fused kernels on the GPU (issue 3): every codec at 64M and 256M, kernels (a)-(e),
# and sampled top-k against torch.topk on the same device. CODECS=0 skips these and the runtime runs.
if [[ ${CODECS:-1} != 0 ]]; then
for c in fp16 bf16 int8 int4 fp8e4m3 fp8e5m2 sign1 topk:0.01 randomk:0.01 powersgd:4; do
  "$bundle/bin/ciuic-bench" compress --device cuda --codec "$c" --sizes 64M,256M --data normal \
    --format json --out "$logs/compress-${c%%:*}.json" > "$logs/compress-${c%%:*}.txt" 2>&1
done
for c in fp16 int8 fp8e4m3 sign1; do
  "$bundle/bin/ciuic-bench" kernel all --device cuda --codec "$c" --sizes 64M,256M --clip \
    --format json --out "$logs/kernel-$c.json" > "$logs/kernel-$c.txt" 2>&1
done
"$py" scripts/device/topk_vs_torch.py "$logs/compress-topk.json" > "$logs/topk_vs_torch.txt" 2>&1
cat "$logs/topk_vs_torch.txt"

# The runtime over NCCL at world size 1 (issue 4): every codec through ciuic::Runtime on device buffers.
for c in none fp16 bf16 int8 int4 fp8e4m3 fp8e5m2 sign1 topk:0.01 randomk:0.01 powersgd:4; do
  "$bundle/bin/ciuic-bench" allreduce --backend ciuic --transport nccl --device cuda --codec "$c" \
    --sizes 1M,64M,256M --inplace yes > "$logs/runtime-${c%%:*}.txt" 2>&1
  echo "runtime $c exit $?" >> "$logs/runtime-summary.txt"
done
# The native algorithm: NCCL's own allreduce in fp32 and in 16-bit reduction precisions (issue 5).
for p in fp32 bf16 fp16; do
  "$bundle/bin/ciuic-bench" allreduce --backend ciuic --transport nccl --device cuda --algo native --precision "$p" \
    --sizes 1M,64M,256M --inplace yes > "$logs/runtime-native-$p.txt" 2>&1
  echo "runtime native $p exit $?" >> "$logs/runtime-summary.txt"
done
# Multi-rank GPU paths on the one GPU: the local transport on device buffers (ranks as threads, a
# CUDA stream each); the bit-for-bit comparison with host buffers is the gpu test LocalDevice.*.
for a in ring:none ring:int8 hier:int8 sparse:topk:0.01 sign2:sign1 powersgd:powersgd:4; do
  algo=${a%%:*}; codec=${a#*:}
  "$bundle/bin/ciuic-bench" allreduce --backend ciuic --transport local --device cuda --ranks 4 \
    --algo "$algo" --codec "$codec" --ranks-per-node 2 --sizes 1M,64M > "$logs/local-device-$algo-${codec%%:*}.txt" 2>&1
  echo "local device 4 ranks $algo $codec exit $?" >> "$logs/runtime-summary.txt"
done
cat "$logs/runtime-summary.txt"
fi

# Codec kernel calibration for the tuner (issue 5): the cost model's codec rates on this GPU, stored
# in SQLite; `ciuic-tune run --calibration FILE` uses them for GPU topologies.
"$bundle/bin/ciuic-tune" calibrate --device cuda --sizes ${CAL_SIZES:-1M:256M:x4} --db "$logs/cuda-calibration.db" \
  > "$logs/calibrate-cuda.txt" 2>&1
echo "calibrate exit $?"; cat "$logs/calibrate-cuda.txt"
