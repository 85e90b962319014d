#!/usr/bin/env bash
# The one prepared GPU run (issue "On the GPU"). Runs on the GPU machine from the repository root with
# build-device/bundle carried along (scripts/device/bundle.sh builds it here; nothing is built there):
#   scripts/device/gpu-check.sh LOGDIR [STEPS]
# STEPS: letters of the steps to run, in this order (default all): a machine and versions, b gpu tests,
# c compute-sanitizer, d NCCL loading the ciuic tuner plugin, e the DDP hook and the digits job on CUDA,
# f a CUPTI trace, g NCCL start-up with a rank missing, h kernels at the roofline and nccl-tests beside
# ciuic-bench, i Nsight Compute over the memory-bound kernels (not in the default set: name it), j the training
# kernels (fused, unfused, PyTorch) on CUDA and ciuic-tune's fusion line, k ciuic-bench --backend nccl and the runtime
# over NCCL started by torchrun and by Slurm's variables. Every step is time-boxed (STEP_SCALE=2 doubles the boxes) and logged to LOGDIR/<id>.log;
# the summary table (step, result, seconds) is printed last and kept in LOGDIR/summary.txt.
# Steps are ordered by value so a run cut off early still brings back a-e.
set -uo pipefail
logs=${1:?usage: gpu-check.sh LOGDIR [STEPS]}
want=${2:-abcdefgkhj}
scale=${STEP_SCALE:-1}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
bundle=$PWD/build-device/bundle
py=${PYTHON:-python3}
nccl_dir=$($py -c "import importlib.util as u; s=u.find_spec('nvidia.nccl'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null)
cupti_dir=$($py -c "import importlib.util as u; s=u.find_spec('nvidia.cuda_cupti'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null)
export LD_LIBRARY_PATH="$bundle/lib:${nccl_dir:+$nccl_dir/lib:}${cupti_dir:+$cupti_dir/lib:}${LD_LIBRARY_PATH:-}"
export CIUIC_LIBRARY=$bundle/lib/libciuic.so PYTHONPATH=$bundle/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
bench=$bundle/bin/ciuic-bench
summary=$logs/summary.txt
printf '%-4s %-58s %-9s %8s\n' step what result seconds > "$summary"

# step ID BOX_SECONDS WHAT -- COMMAND...: runs COMMAND with its output in LOGDIR/ID.log, killed after
# BOX_SECONDS x STEP_SCALE; exit 0 pass, 77 skip (its last line says why), else FAIL.
step() {
  local id=$1 box=$2 what=$3
  shift 4
  [[ $want == *"${id:0:1}"* ]] || return 0
  local t0=$SECONDS rc
  echo "=== $id: $what (box $((box * scale)) s)"
  timeout -k 5 $((box * scale)) "$@" > "$logs/$id.log" 2>&1
  rc=$?
  local result
  case $rc in
    0) result=pass ;;
    77) result=skip ;;
    124|137) result=TIMEOUT ;;
    *) result="FAIL($rc)" ;;
  esac
  printf '%-4s %-58s %-9s %8d\n' "$id" "$what" "$result" $((SECONDS - t0)) >> "$summary"
  tail -n 4 "$logs/$id.log"
}

# Two ciuic-bench processes as a torchrun job on the one GPU. NCCL refuses two ranks of one host on
# one device, so each process names its own host (NCCL_HOSTID): NCCL then joins them through its
# socket transport as two nodes of one rank, which is also what the plugin sees (2 ranks, 2 nodes).
port=$((29500 + RANDOM % 2000))
pair() {  # pair EXTRA_ENV_FOR_RANK1 -- ciuic-bench args...; rank 0's output on stdout, rank 1's in $logs/pair-rank1.log
  local extra=$1
  shift 2
  port=$((port + 7))
  env RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    NCCL_HOSTID=ciuic-pair-b NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 $extra "$bench" "$@" > "$logs/pair-rank1.log" 2>&1 &
  local other=$!
  env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    NCCL_HOSTID=ciuic-pair-a NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 "$bench" "$@"
  local rc=$?
  kill -CONT $other 2>/dev/null; sleep 1; kill -KILL $other 2>/dev/null; wait $other 2>/dev/null
  return $rc
}
export -f pair
export bench logs port

step_a() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
  echo "nccl wheel: ${nccl_dir:-none}; cupti wheel: ${cupti_dir:-none}"
  $py - <<'PY'
import importlib.metadata as m, torch
for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-cuda-cupti", "nvidia-cuda-cupti-cu12", "torch"):
    try:
        print(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        pass
print(f"torch sees {torch.cuda.get_device_name(0)}, cuda {torch.version.cuda}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs")
PY
  "$bench" list
  ldd "$bench" "$bundle/lib/libciuic.so" | grep -E 'nccl|cupti|gloo|not found' | sort -u
  command -v compute-sanitizer && compute-sanitizer --version | tail -n 1
}

step_b() {
  # Every gpu test on its own line (gtest prints one per test).
  "$bundle/bin/test_gpu" --gtest_color=no ${B_FILTER:+--gtest_filter=$B_FILTER}
}

step_c() {
  local cs=compute-sanitizer rc=0
  command -v $cs > /dev/null || { echo "skipped: compute-sanitizer not on PATH"; return 77; }
  # A short filter: the device-transport and codec kernels (every kernel launch is checked, ~10-100x slower);
  # memcheck also the LayerNorm backward that keeps dz in its workspace (not run on a GPU before 2026-11-30).
  # C_FILTER replaces both filters (e.g. the training kernels' twins alone).
  timeout -k 5 $((55 * scale)) $cs --tool memcheck --error-exitcode 9 --print-limit 20 "$bundle/bin/test_gpu" --gtest_color=no \
    --gtest_filter=${C_FILTER:-'Codecs/CodecTwin.CudaEqualsCpuBitForBit/fp16:Codecs/CodecTwin.CudaEqualsCpuBitForBit/int8:Codecs/CodecTwin.CudaEqualsCpuBitForBit/int4:Codecs/CodecTwin.CudaEqualsCpuBitForBit/fp8e4m3:Codecs/CodecTwin.CudaEqualsCpuBitForBit/sign1:Codecs/CodecTwin.CudaEqualsCpuBitForBit/topk_0_01*:TopKTwin.*:FusedTwin.*:LocalDevice.BenchRunnerOverTheRuntimeVerifies:TrainTwin.LnActDropoutForwardBackward'} \
    || rc=$?
  echo "memcheck exit $rc (124: its 55 s box ran out)"
  local rc2=0
  timeout -k 5 $((35 * scale)) $cs --tool racecheck --error-exitcode 9 --print-limit 20 "$bundle/bin/test_gpu" --gtest_color=no \
    --gtest_filter=${C_FILTER:-'Codecs/CodecTwin.CudaEqualsCpuBitForBit/int8:Codecs/CodecTwin.CudaEqualsCpuBitForBit/sign1:Codecs/CodecTwin.CudaEqualsCpuBitForBit/topk_0_01_sampled:TopKTwin.*:FusedTwin.*'} \
    || rc2=$?
  echo "racecheck exit $rc2 (124: its 35 s box ran out)"
  # Top-k's warp-synchronous look-back and last-block digit pick: barriers and warp masks.
  local rc3=0
  timeout -k 5 $((25 * scale)) $cs --tool synccheck --error-exitcode 9 --print-limit 20 "$bundle/bin/test_gpu" --gtest_color=no \
    --gtest_filter=${C_FILTER:-'Codecs/CodecTwin.CudaEqualsCpuBitForBit/topk_0_01*:TopKTwin.*'} || rc3=$?
  echo "synccheck exit $rc3 (124: its 25 s box ran out)"
  [[ $rc == 0 && $rc2 == 0 && $rc3 == 0 ]]
}

step_d() {
  local prof=$PWD/scripts/device/two_hosts_one_gpu.profile.json rc=0
  export NCCL_TUNER_PLUGIN=$bundle/lib/libnccl-tuner-ciuic.so CIUIC_PROFILE=$prof NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV
  echo "--- one rank (NCCL runs a one-rank communicator without consulting a tuner: the load lines only)"
  "$bench" allreduce --backend nccl --device cuda --sizes 4K --iters 5 --warmup 2 || rc=$?
  echo "--- two ranks on the one GPU as two hosts; the profile's bands: <64K tree/ll, 64K-4M ring/ll128, >=4M ring/simple"
  pair "" -- allreduce --backend nccl --device cuda --sizes 16K,1M,64M --iters 5 --warmup 2 --timeout 60 || rc=$?
  echo "--- rank 1"; cat "$logs/pair-rank1.log"
  return $rc
}

step_e() {
  local rc=0
  $py tests/python/comm_hook_gpu_test.py || rc=$?
  echo "comm_hook_gpu_test exit $rc"
  local rc2=0
  $py scripts/digits_tta.py --device cuda --world 2 --seeds 1 --steps 40 --eval-every 20 --configs none,int8 \
    --out "$logs/digits-cuda" --deadline 150 || rc2=$?
  echo "digits on cuda exit $rc2"
  [[ $rc == 0 && $rc2 == 0 ]]
}

step_f() {
  "$bench" allreduce --backend ciuic --transport local --ranks 2 --device cuda --algo ring --codec int8 \
    --sizes 1M,16M --iters 5 --warmup 2 --trace "$logs/trace-cuda.json" || return $?
  $py - "$logs/trace-cuda.json" <<'PY'
import collections, json, sys
t = json.load(open(sys.argv[1]))
kinds = collections.Counter((e.get("pid"), e.get("cat")) for e in t["traceEvents"] if e.get("ph") == "X")
for k, v in sorted(kinds.items(), key=str):
    print(f"rank {k[0]} {k[1]}: {v}")
kernels = {p for (p, c), v in kinds.items() if c == "gpu.kernel" and v > 0}
print("ranks with kernel tracks:", sorted(kernels))
sys.exit(0 if kernels == {0, 1} else 1)
PY
}

step_g() {
  local t0=$SECONDS rc=0
  pair "CIUIC_FAULT=nccl-startup:1:stop" -- allreduce --backend nccl --device cuda --sizes 1M --timeout 10 \
    > "$logs/g-rank0.log" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  cat "$logs/g-rank0.log"; echo "--- rank 1 (stopped before NCCL's start-up)"; cat "$logs/pair-rank1.log"
  echo "rank 0 exit $rc after $took s (NCCL start-up limit 10 s)"
  # Pass: rank 0 ended with the runtime-failure code within the limit plus start-up, naming rank 1.
  [[ $rc == 2 && $took -le 40 ]] && grep -q "rank 1 never arrived" "$logs/g-rank0.log"
}

step_h() {
  local rc=0
  $py scripts/device/roofline.py "$bench" "$logs" || rc=$?
  # H_PARTS=roofline leaves nccl-tests out (a rerun with less device time left).
  if [[ ${H_PARTS:-all} == roofline ]]; then
    echo "nccl-tests side by side left out (H_PARTS=roofline)"
  elif [[ -x $bundle/nccl-tests/all_reduce_perf ]]; then
    $py scripts/device/nccl_tests_side_by_side.py "$bench" "$bundle/nccl-tests" "$logs" || rc=$?
  else
    echo "nccl-tests not in the bundle (scripts/device/bundle.sh builds them from a fetched snapshot)"
    rc=1
  fi
  return $rc
}

step_i() {
  command -v ncu > /dev/null || { echo "skipped: ncu not on PATH"; return 77; }
  local sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats"
  local rc=0
  for c in int8 sign1 fp16; do
    ncu --clock-control none $sections -k regex:'DecodeVec|QuantEncodeKernel|CastEncodeVec' -c 4 \
      "$bench" compress --device cuda --codec $c --sizes 64M --iters 3 > "$logs/ncu-decode-$c.txt" 2>&1 || rc=$?
  done
  ncu --clock-control none $sections -k regex:'InitState|HistogramPass|SelectAndWrite|PadSlots' -c 7 \
    "$bench" compress --device cuda --codec topk:0.01 --sizes 64M --iters 3 > "$logs/ncu-topk.txt" 2>&1 || rc=$?
  ncu --clock-control none $sections -k regex:'MultiTensorCopy' -c 2 \
    "$bench" kernel flatten --device cuda --sizes 64M --iters 3 > "$logs/ncu-flatten.txt" 2>&1 || rc=$?
  # sign1's ring hop (58-62% of copy on 2026-11-28): what bounds it.
  ncu --clock-control none $sections -k regex:'QuantEncodeKernel' -c 2 \
    "$bench" kernel decode-add-encode --device cuda --codec sign1 --sizes 64M --iters 3 > "$logs/ncu-hop-sign1.txt" 2>&1 || rc=$?
  grep -hE "^  [A-Za-z].*\(|DRAM Throughput|Memory Throughput|Achieved Occupancy|Duration|Registers Per" "$logs"/ncu-*.txt | head -80
  return $rc
}

# The training kernels on the GPU (issue "The seeds' fused training kernels"): the twin against the CPU
# oracle runs in step b (gpu.TrainTwin.*); here fused vs unfused vs PyTorch's eager sequence on CUDA at
# the workloads' hidden sizes, and ciuic-tune's fusion line calibrated on this GPU.
step_j() {
  local rc=0
  # This GPU's calibration, its training kernels at the shipped transformer shapes included (rows
  # train:add-ln / train:bias-gelu; brought back in fusion.db: a study here of a topology with this GPU
  # reads them with --calibration).
  timeout -k 5 $((60 * scale)) "$bundle/bin/ciuic-tune" calibrate --device cuda --sizes 1M --rounds 1 \
    --db "$logs/fusion.db" > "$logs/fusion-calibrate.log" 2>&1 || rc=1
  grep -A8 "training kernels" "$logs/fusion-calibrate.log" || rc=1
  # The fusion line: from that calibration where the topology's GPU is this one, else timed now.
  timeout -k 5 $((90 * scale)) "$bundle/bin/ciuic-tune" run --topology dgx_h100 --workload gpt2_xl --budget 4 \
    --db "$logs/fusion.db" --out "$logs/fusion.profile.json" > "$logs/fusion.log" 2>&1 || rc=1
  grep -E "^fusion" "$logs/fusion.log" || rc=1
  # J_SHAPES / J_DTYPES narrow the table (a rerun with less device time left).
  CIUIC_PYTHON=$(command -v "$py") CIUIC_PYTHONPATH=$bundle/python "$bench" kernel all-training --device cuda \
    --shape "${J_SHAPES:-4096x1024,4096x1600,4096x4096}" --dtype "${J_DTYPES:-fp32,bf16}" --iters 20 --format csv \
    --out "$logs/train-kernels.csv" || rc=$?
  # fp16 rows (none measured on a GPU before 2026-11-30) at the smallest and largest hidden size, in what
  # is left of the step's box; J_FP16=0 leaves them out.
  if [ "${J_FP16:-1}" = 1 ]; then
    CIUIC_PYTHON=$(command -v "$py") CIUIC_PYTHONPATH=$bundle/python timeout -k 5 $((45 * scale)) "$bench" kernel \
      all-training --device cuda --shape 4096x1024,4096x4096 --dtype fp16 --iters 20 --format csv \
      --out "$logs/train-kernels-fp16.csv" || rc=$?
  fi
  return $rc
}

# The launchers on NCCL (issue "A tool people install", its GPU part): torchrun starting ciuic-bench as two
# one-process "nodes" (each torchrun names its own NCCL_HOSTID, since the one GPU cannot hold two ranks
# of one NCCL host), then two processes given Slurm's variables by hand. Each writes its JSON report;
# rank 0's must say world size 2 and carry rows with #wrong 0.
step_k() {
  local rc=0 w=$logs/k
  export kport=$((port + 101)) kw=$w
  mkdir -p "$w"
  check() {  # check REPORT WHAT
    $py - "$1" "$2" <<'PY' || rc=1
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["results"]
ws = r["context"]["world_size"]
wrong = sum(x["wrong"] for x in rows)
ok = ws == 2 and rows and wrong == 0
print(f"{sys.argv[2]}: world size {ws}, {len(rows)} rows, #wrong {wrong}:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
  }
  # both FN ARGS...: FN 0 ARGS and FN 1 ARGS side by side (a rank, or a node, each), on a fresh port;
  # fails unless both exit 0.
  both() {
    local fn=$1 one two
    shift
    kport=$((kport + 3))
    $fn 0 "$@" &
    one=$!
    $fn 1 "$@" &
    two=$!
    wait $one || rc=1
    wait $two || rc=1
  }
  local args=(allreduce --sizes 64K,4M --iters 5 --warmup 2 --format json --timeout 60)
  torchrun_node() {  # torchrun_node NODE TAG BACKEND-ARGS...
    local node=$1 tag=$2
    shift 2
    NCCL_HOSTID=ciuic-node-$node NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 $py -m torch.distributed.run --no_python \
      --nnodes 2 --node_rank $node --nproc_per_node 1 --master_addr 127.0.0.1 --master_port $kport \
      "$bench" "${args[@]}" "$@" --out "$kw/torchrun-$tag.json" > "$kw/torchrun-$tag-node$node.log" 2>&1
  }
  slurm_rank() {  # slurm_rank RANK
    env SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 SLURM_NODELIST=localhost \
      CIUIC_STORE_PORT=$kport NCCL_HOSTID=ciuic-slurm-$1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
      "$bench" "${args[@]}" --backend nccl --out "$kw/srun-nccl.json" > "$kw/srun-rank$1.log" 2>&1
  }
  if $py -c 'import torch.distributed.run' 2> /dev/null; then
    for run in "nccl" "ciuic --transport nccl --device cuda --algo ring --codec int8"; do
      local tag=${run%% *}
      # shellcheck disable=SC2086 # the backend's words
      both torchrun_node "$tag" --backend $run
      tail -n 5 "$w/torchrun-$tag-node0.log"
      check "$w/torchrun-$tag.json" "torchrun, --backend $run"
    done
  else
    echo "torch.distributed.run not importable: torchrun part skipped"; rc=1
  fi
  both slurm_rank
  tail -n 5 "$w/srun-rank0.log"
  check "$w/srun-nccl.json" "Slurm's variables, --backend nccl"
  return $rc
}

export -f step_a step_b step_c step_d step_e step_f step_g step_h step_i step_j step_k
export bundle py nccl_dir cupti_dir scale
step a 30 "machine, driver, NCCL/CUPTI versions" -- bash -c step_a
step b 150 "gpu tests (test_gpu)" -- bash -c step_b
step c 100 "compute-sanitizer memcheck + racecheck (short filter)" -- bash -c step_c
step d 60 "NCCL loads libnccl-tuner-ciuic.so (1 rank; 2 ranks as 2 hosts)" -- bash -c step_d
step e 150 "DDP hook on CUDA (2 processes, 1 GPU) + digits on CUDA" -- bash -c step_e
step f 40 "CUPTI trace of --backend ciuic --device cuda" -- bash -c step_f
step g 45 "NCCL start-up with rank 1 missing: abort, culprit" -- bash -c step_g
step k 90 "torchrun and Slurm's variables starting --backend nccl" -- bash -c step_k
step h 200 "roofline kernels, top-k vs torch, nccl-tests side by side" -- bash -c step_h
step j 230 "training kernels fused/unfused/torch on CUDA, fusion line" -- bash -c step_j
step i 150 "Nsight Compute over the codec, top-k and flatten kernels" -- bash -c step_i
echo
cat "$summary"
