#!/usr/bin/env bash
# ciuic-bench as the ranks of a job torchrun or srun started (bench/job_launch.h), not mpiexec:
#   1. torchrun (Debian's torch: python3 -m torch.distributed.run --no_python --nproc_per_node 2)
#      starting ciuic-bench with gloo's allreduce, then the runtime over gloo (--backend ciuic, its
#      transport defaulting to gloo under a job launcher): exit 0, one report, world size 2, no
#      mpiexec started;
#   2. two processes given Slurm's variables by hand (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
#      SLURM_NODELIST=localhost, CIUIC_STORE_PORT): the same, --backend gloo and --backend ciuic;
#   3. refusals: --backend mpi under a job launcher, --ranks 3 in a 2-rank job, a half-set environment;
#   4. a rank that dies mid-run (CIUIC_FAULT kill or exit in a timed iteration) in a 3-rank job on
#      torchrun's variables, victims rank 0, 1 and 2, over gloo's own allreduce and the runtime's ring
#      over gloo: every survivor exits 2 within the deadline and names the victim (the job's store
#      saw its connection close without a word; rank 0's death ends the store itself), never another
#      rank; a stopped rank: the survivors end at their deadline with exit 2 and name it (its beats in
#      the job's store stopped), or, rank 0 stopped, say that its store did not answer;
#   5. the launcher ended: torchrun sent SIGTERM (it passes it on: rank 0 says "interrupted", exit
#      143) or SIGKILL (nothing passed on: each rank finds its agent gone and ends); no rank left after
#      5 s, --out never written. A shell that started a rank by hand and exited is no such launcher:
#      the rank runs to its end.
# Usage: launch_test.sh CIUIC_BENCH
set -u
bench=$1
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
check_report() {  # FILE WHAT: a ciuic.bench/1 JSON of a 2-rank world, every row verified
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail=1
import json, sys
path, what = sys.argv[1], sys.argv[2]
j = json.load(open(path))
ctx, rows = j["context"], j["results"]
ok = ctx["world_size"] == 2 and bool(rows) and all(r.get("wrong") == 0 and "error" not in r for r in rows)
print(f"launch_test: {what}: world_size {ctx['world_size']}, {len(rows)} rows", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
}
args=(allreduce --sizes 4K:256K --iters 3 --warmup 1 --format json --timeout 30)

if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  for backend in gloo ciuic; do
    port=$(free_port)
    # --redirects/--tee 2: Debian's torch 1.13 on Python 3.11 fails on their default, 0 (its Std flag
    # enum no longer yields the zero member when iterated); 2 sends each rank's stderr to a file and on.
    /usr/bin/python3 -m torch.distributed.run --no_python --nproc_per_node 2 --master_addr 127.0.0.1 \
      --master_port "$port" --redirects 2 --tee 2 --log_dir "$work/torchrun-logs-$backend" "$bench" "${args[@]}" --backend "$backend" --out "$work/torchrun-$backend.json" \
      > "$work/torchrun-$backend.log" 2>&1
    code=$?
    if [ "$code" -ne 0 ]; then echo "launch_test: torchrun $backend: exit $code"; tail -n 8 "$work/torchrun-$backend.log"; fail=1; continue; fi
    check_report "$work/torchrun-$backend.json" "torchrun, --backend $backend"
    if grep -rq "starting .*mpiexec" "$work/torchrun-$backend.log" "$work/torchrun-logs-$backend"; then
      echo "launch_test: torchrun $backend started mpiexec"; fail=1
    fi
  done
else
  echo "launch_test: torch.distributed.run not importable by /usr/bin/python3 (python3-torch): torchrun part skipped"
  skipped=1
fi

for backend in gloo ciuic; do
  port=$(free_port)
  pids=()
  extra=()
  [ "$backend" = ciuic ] && extra=(--transport gloo)
  for r in 0 1; do
    env SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=2 SLURM_NODELIST=localhost \
      CIUIC_STORE_PORT="$port" "$bench" "${args[@]}" --backend "$backend" "${extra[@]}" --out "$work/srun-$backend.json" \
      > "$work/srun-$backend-$r.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}"
    code=$?
    if [ "$code" -ne 0 ]; then
      echo "launch_test: srun variables, --backend $backend, rank $i: exit $code"
      tail -n 8 "$work/srun-$backend-$i.log"
      fail=1
    fi
  done
  if [ -s "$work/srun-$backend.json" ]; then
    check_report "$work/srun-$backend.json" "Slurm's variables, --backend $backend${extra[*]:+ ${extra[*]}}"
  else
    echo "launch_test: Slurm's variables, --backend $backend: no report"
    fail=1
  fi
done
if grep -q "starting .*mpiexec" "$work"/srun-*.log; then echo "launch_test: a Slurm rank started mpiexec"; fail=1; fi

refused() {  # WANT ENV... -- ARGS: exit 1 and one line containing WANT
  local want=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$bench" "$@" > "$work/refused.out" 2> "$work/refused.err"
  local code=$? lines
  lines=$(grep -c . "$work/refused.err")
  if [ "$code" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$want" "$work/refused.err"; then
    echo "launch_test: expected exit 1 and one line with '$want', got exit $code:"; sed 's/^/    /' "$work/refused.err"; fail=1
  else
    echo "launch_test: refused: $(cat "$work/refused.err")"
  fi
}
job=(RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1)
refused "needs mpiexec" "${job[@]}" -- allreduce --backend mpi --sizes 4K
refused "--ranks 3 but torchrun started 2" "${job[@]}" -- allreduce --backend gloo --sizes 4K --ranks 3
refused "MASTER_ADDR" RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 -- allreduce --backend gloo --sizes 4K
refused "RANK='2'" RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 -- allreduce --sizes 4K
refused "SLURM_NTASKS" SLURM_PROCID=0 SLURM_NTASKS=x SLURM_NODELIST=n1 -- allreduce --sizes 4K
# died ACTION VICTIM BACKEND...: 3 ranks on torchrun's variables, the victim failing at its 3rd timed
# iteration; each survivor's exit and its line about the victim. A victim that ends (kill, exit) is
# then treated as torchrun's agent treats a failed worker: the others get SIGTERM a moment later (its
# monitor interval: 0.1 s from torch 2.4 on, 5 s before), here 1.5 s after the victim ended. A survivor
# must have named the victim and ended by then, also one that waited on rank 0 and not on the victim
# (rank 0 keeps serving the store for the others after its error, but must not keep them waiting).
died() {
  local action=$1 victim=$2
  shift 2
  local port pids=() r
  port=$(free_port)
  for r in 0 1 2; do
    env RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      CIUIC_FAULT="collective:$victim:$action:3" "$bench" allreduce --sizes 1M --iters 20 --warmup 1 --timeout 3 "$@" \
      > "$work/died-$r.log" 2>&1 &
    pids+=($!)
  done
  local start=$SECONDS want
  if [ "$action" = stop ] && [ "$victim" -eq 0 ]; then
    want="rank 0's store did not answer"  # the store lives in the stopped rank 0
  elif [ "$action" = stop ]; then
    want="rank $victim silent for [0-9.]* s (stopped or stuck"  # its beats in the job's store stopped
  elif [ "$victim" -eq 0 ]; then
    want="rank 0, which served the job's store, has ended"
  else
    want="rank $victim is gone: its connection to the job's store closed"
  fi
  if [ "$action" != stop ]; then
    wait "${pids[$victim]}" 2>/dev/null
    local alive
    for _ in $(seq 15); do
      alive=0
      for r in 0 1 2; do [ "$r" -ne "$victim" ] && kill -0 "${pids[$r]}" 2>/dev/null && alive=1; done
      [ "$alive" -eq 0 ] && break
      sleep 0.1
    done
    for r in 0 1 2; do [ "$r" -ne "$victim" ] && kill -TERM "${pids[$r]}" 2>/dev/null; done
  fi
  for r in 0 1 2; do
    [ "$r" -eq "$victim" ] && continue
    wait "${pids[$r]}"
    local code=$?
    if [ "$code" -ne 2 ] || ! grep -q "$want" "$work/died-$r.log" ||
       grep -v "rank $victim is gone" "$work/died-$r.log" | grep -q "is gone"; then
      echo "launch_test: $action rank $victim ($*): survivor rank $r exit $code, expected 2 and '$want':"
      grep -v '^#' "$work/died-$r.log" | sed 's/^/    /'; fail=1
    fi
  done
  kill -KILL "${pids[$victim]}" 2>/dev/null
  wait "${pids[$victim]}" 2>/dev/null
  local took=$((SECONDS - start))
  if [ "$took" -gt 8 ]; then echo "launch_test: $action rank $victim ($*): the survivors took $took s"; fail=1; fi
  echo "launch_test: $action rank $victim ($*), survivors after ${took} s: $(grep -h -o "$want[^;]*" "$work"/died-*.log | sort -u | head -n 1)"
}
died kill 1 --backend gloo 2>/dev/null
died exit 2 --backend ciuic --transport gloo --algo ring 2>/dev/null
died kill 0 --backend gloo 2>/dev/null
died stop 1 --backend gloo 2>/dev/null
died stop 0 --backend ciuic --transport gloo --algo ring 2>/dev/null

# ended LAUNCHER SIGNAL: a 2-rank job in a long run, its launcher (torchrun) sent SIGNAL. TERM: torchrun passes it on to its workers; rank 0 says "interrupted (SIGTERM)" and
# every rank exits 143. KILL: nothing is passed on; each rank finds itself orphaned within 0.2 s, says
# its launcher has ended and ends as by SIGTERM. Either way no rank is left after 5 s (the run has
# --timeout 30 and would take minutes) and --out is never written.
ended() {
  local launcher=$1 sig=$2 tag="ended-$1-$2" port pid left=1 want
  port=$(free_port)
  local run=(allreduce --backend gloo --sizes 1M --iters 1000000 --warmup 1 --timeout 30 --out "$work/$tag.json")
  /usr/bin/python3 -m torch.distributed.run --no_python --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$port" --redirects 2 --tee 2 --log_dir "$work/$tag-logs" "$bench" "${run[@]}" > "$work/$tag.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do  # both ranks running their timed loop: rank 0 has printed the table's head
    [ "$(pgrep -c -f -- "--out $work/$tag.json")" -ge 2 ] && grep -q "in-place" "$work/$tag.log" && break
    sleep 0.1
  done
  sleep 1
  kill "-$sig" "$pid"
  wait "$pid" 2>/dev/null
  local start=$SECONDS
  for _ in $(seq 50); do
    pgrep -f -- "--out $work/$tag.json" > /dev/null || { left=0; break; }
    sleep 0.1
  done
  if [ "$sig" = TERM ]; then
    want="interrupted (SIGTERM): rank 0 of 2 ($launcher) ends; exit 143"
  else
    want="rank [01] of 2: its launcher ($launcher, pid $pid) has ended; ending this rank"
  fi
  # Each rank's own stderr: torchrun's log folder (its tee into $tag.log dies with it).
  local ranks_said=0 any_said=0 f files
  files=$(find "$work/$tag-logs" -name stderr.log 2>/dev/null | sort)
  for f in $files; do grep -q -- "$want" "$f" && ranks_said=$((ranks_said + 1)); done
  grep -rq -- "$want" "$work/$tag.log" $files && any_said=1
  if [ "$left" -ne 0 ] || [ -e "$work/$tag.json" ] || [ "$any_said" -ne 1 ] ||
     { [ "$sig" = KILL ] && [ "$ranks_said" -ne 2 ]; }; then
    echo "launch_test: $launcher sent SIG$sig: ranks left: $left, out written: $([ -e "$work/$tag.json" ] && echo yes || echo no), expected '$want' (from each rank on SIGKILL: $ranks_said did):"
    for f in "$work/$tag.log" $files; do grep -v '^#' "$f" | sed 's/^/    /'; done
    fail=1
    pkill -KILL -f -- "--out $work/$tag.json"
  else
    echo "launch_test: $launcher sent SIG$sig: every rank ended within $((SECONDS - start)) s: $(cat "$work/$tag.log" $files | grep -o -m 1 -- "$want")"
  fi
}
if [ "${skipped:-0}" -eq 0 ]; then
  ended torchrun TERM
  ended torchrun KILL
fi
# A shell that starts a rank with torchrun's variables by hand and exits while it runs (nohup, `&`)
# is no launcher that died: the rank, a world of 1, runs to its end and writes its report.
port=$(free_port)
bash -c 'env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT='"$port"' "$@" > "$0.log" 2>&1 & sleep 1' \
  "$work/detached" "$bench" allreduce --backend gloo --sizes 64M --iters 600 --warmup 1 --timeout 30 --format json --out "$work/detached.json"
for _ in $(seq 300); do pgrep -f -- "--out $work/detached.json" > /dev/null || break; sleep 0.1; done
if [ -s "$work/detached.json" ] && ! grep -q "has ended" "$work/detached.log"; then
  echo "launch_test: a rank outlived the shell that started it, ran to its end and wrote its report"
else
  echo "launch_test: a rank whose shell exited did not run to its end:"; sed 's/^/    /' "$work/detached.log"; fail=1
fi

[ "$fail" -eq 0 ] || exit 1
[ "${skipped:-0}" -eq 0 ] || exit 77
echo "launch_test: every check passed"
