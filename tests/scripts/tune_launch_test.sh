#!/usr/bin/env bash
# ciuic-tune --mode measure as the ranks of a job torchrun or srun started (tuner/bench_runner.h):
# rank 0 runs the study and every rank starts each ciuic-bench run with it, over gloo.
#   1. torchrun (python3 -m torch.distributed.run --no_python --nproc_per_node 2): exit 0 on both
#      ranks, a profile whose every rule was measured, rank 0's log naming the job, no mpiexec, no
#      study table from rank 1;
#   2. two processes given Slurm's variables by hand: the same;
#   3. a 3-rank job for the 2-rank topology: rank 0 says why in one line, every rank exits 1;
#   4. --transport mpi under a launcher: exit 1 and one line, before any rank waits;
#   5. rank 0 killed mid-run (torchrun's variables, MASTER_ADDR=::1): the other rank ends within 15 s
#      naming rank 0, nothing left running (its own ciuic-bench, waiting for rank 0's, is ended when
#      rank 0's store closes);
#   6. torchrun's agent SIGKILLed mid-study: each rank says its launcher ended and ends as by SIGTERM
#      within 5 s, its ciuic-bench runs too; no profile written.
# Usage: tune_launch_test.sh CIUIC_TUNE GATE_DB (a database holding the accuracy gate's verdicts for
# these options, mpi.tune_measure's: the gate is read back, not trained again)
set -u
tune=$1
gate_db=$2
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
study=(run --topology cpu_local --mode measure --workload resnet50 --gate-seeds 1 --band-candidates 1 --strategy random
       --budget 3 --seed 5)
check_profile() {  # FILE WHAT: every rule measured (measured_us and baseline_us positive)
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail=1
import json, sys
path, what = sys.argv[1], sys.argv[2]
rules = json.load(open(path))["rules"]
bad = [r for r in rules if not (isinstance(r.get("measured_us"), (int, float)) and r["measured_us"] > 0
                                and isinstance(r.get("baseline_us"), (int, float)) and r["baseline_us"] > 0)]
print(f"tune_launch_test: {what}: {len(rules)} rules, {len(bad)} not measured", "ok" if rules and not bad else "FAILED")
sys.exit(1 if bad or not rules else 0)
PY
}
no_mpiexec() {  # WHAT FILES...
  local what=$1
  shift
  if grep -q "starting .*mpiexec" "$@" 2>/dev/null; then echo "tune_launch_test: $what started mpiexec"; fail=1; fi
}

if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  port=$(free_port)
  cp "$gate_db" "$work/torchrun.db"
  # --redirects/--tee 2: see launch_test.sh (Debian's torch 1.13 on Python 3.11).
  /usr/bin/python3 -m torch.distributed.run --no_python --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$port" --redirects 2 --tee 2 --log_dir "$work/torchrun-logs" "$tune" "${study[@]}" \
    --db "$work/torchrun.db" --out "$work/torchrun.profile.json" > "$work/torchrun.log" 2>&1
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "tune_launch_test: torchrun: exit $code"; tail -n 12 "$work/torchrun.log"; fail=1
  else
    check_profile "$work/torchrun.profile.json" "torchrun"
    grep -q "measure: ciuic-bench on the 2 ranks torchrun started" "$work/torchrun.log" ||
      { echo "tune_launch_test: torchrun: rank 0 did not name the job"; fail=1; }
    [ "$(grep -c "^# study [0-9]*:" "$work/torchrun.log")" -eq 1 ] ||
      { echo "tune_launch_test: torchrun: expected one study table (rank 0's)"; grep "^# study" "$work/torchrun.log"; fail=1; }
  fi
  no_mpiexec torchrun "$work/torchrun.log"
else
  echo "tune_launch_test: torch.distributed.run not importable by /usr/bin/python3 (python3-torch): torchrun part skipped"
  skipped=1
fi

# srun's variables by hand: RANKS processes, rank R's output in $work/NAME-R.log; sets codes[].
slurm() {  # NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  local port
  port=$(free_port)
  pids=()
  for r in $(seq 0 $((ranks - 1))); do
    env SLURM_PROCID=$r SLURM_NTASKS=$ranks SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=$ranks SLURM_NODELIST=localhost \
      CIUIC_STORE_PORT="$port" "$tune" "$@" > "$work/$name-$r.log" 2>&1 &
    pids+=($!)
  done
  codes=()
  for r in $(seq 0 $((ranks - 1))); do
    wait "${pids[$r]}"
    codes+=($?)
  done
}
cp "$gate_db" "$work/srun.db"
slurm srun 2 "${study[@]}" --db "$work/srun.db" --out "$work/srun.profile.json"
if [ "${codes[0]}" -ne 0 ] || [ "${codes[1]}" -ne 0 ]; then
  echo "tune_launch_test: Slurm variables: exit ${codes[*]}"; tail -n 8 "$work"/srun-*.log; fail=1
else
  check_profile "$work/srun.profile.json" "Slurm's variables"
  grep -q "measure: ciuic-bench on the 2 ranks srun started" "$work/srun-0.log" ||
    { echo "tune_launch_test: srun: rank 0 did not name the job"; fail=1; }
  if grep -q "^# study" "$work/srun-1.log"; then echo "tune_launch_test: srun: rank 1 ran a study"; fail=1; fi
fi
no_mpiexec srun "$work"/srun-*.log

cp "$gate_db" "$work/three.db"
slurm three 3 "${study[@]}" --db "$work/three.db" --out "$work/three.profile.json"
if [ "${codes[*]}" != "1 1 1" ]; then
  echo "tune_launch_test: a 3-rank job for a 2-rank topology: exit ${codes[*]}, expected 1 1 1"; fail=1
elif ! grep -q "the topology has 2 ranks, the job 3" "$work/three-0.log" ||
     ! grep -q "rank 0's study ended with exit 1" "$work/three-1.log" "$work/three-2.log"; then
  echo "tune_launch_test: a 3-rank job: not said:"; tail -n 3 "$work"/three-*.log; fail=1
else
  echo "tune_launch_test: refused: $(grep "the topology" "$work/three-0.log")"
fi

env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" "$tune" "${study[@]}" --transport mpi \
  --db "$work/mpi.db" > "$work/mpi.out" 2> "$work/mpi.err"
code=$?
if [ "$code" -ne 1 ] || [ "$(grep -c . "$work/mpi.err")" -ne 1 ] || ! grep -q "needs mpiexec" "$work/mpi.err"; then
  echo "tune_launch_test: --transport mpi under torchrun's variables: exit $code:"; cat "$work/mpi.err"; fail=1
else
  echo "tune_launch_test: refused: $(cat "$work/mpi.err")"
fi

# Rank 0 killed while the study runs: rank 1 ends on its own, naming rank 0, and leaves nothing.
# torchrun's variables with an IPv6 MASTER_ADDR: rank 1 first has to reach rank 0's stores over IPv6.
cp "$gate_db" "$work/kill.db"
port=$(free_port)
for r in 0 1; do
  env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=::1 MASTER_PORT="$port" \
    "$tune" "${study[@]}" --db "$work/kill.db" --out "$work/kill.profile.json" \
    > "$work/kill-$r.log" 2>&1 &
  kpids[$r]=$!
done
for _ in $(seq 1 300); do grep -q "^measure: ciuic-bench on the 2 ranks" "$work/kill-0.log" && break; sleep 0.1; done
sleep 0.5  # mid-run: rank 1's own ciuic-bench would wait out its deadline for rank 0's
kill -KILL "${kpids[0]}"
wait "${kpids[0]}" 2>/dev/null
start=$(date +%s)
for _ in $(seq 1 150); do kill -0 "${kpids[1]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${kpids[1]}" 2>/dev/null; then
  echo "tune_launch_test: rank 1 still running 15 s after rank 0 was killed"; fail=1
  kill -KILL "${kpids[1]}"
fi
wait "${kpids[1]}"
code=$?
took=$(( $(date +%s) - start ))
if [ "$code" -eq 0 ] || ! grep -q "rank 0's ciuic-tune at .* went away" "$work/kill-1.log"; then
  echo "tune_launch_test: rank 1 after rank 0's death: exit $code:"; tail -n 3 "$work/kill-1.log"; fail=1
else
  echo "tune_launch_test: rank 0 killed: rank 1 exit $code after ${took} s: $(grep "went away" "$work/kill-1.log" | head -c 200)"
fi
sleep 1
# The ranks (their arguments name $work) and their ciuic-bench runs (named after their pids).
left="$work/kill|ciuic_tune_${kpids[0]}_|ciuic_tune_${kpids[1]}_"
if pgrep -f "$left" > /dev/null; then echo "tune_launch_test: processes left:"; pgrep -af "$left"; fail=1; fi

# torchrun's agent SIGKILLed while the study runs: it passes nothing on, so each rank finds its agent
# gone, says so and ends as by SIGTERM (rank 0: "interrupted", exit 143, what the study stored kept);
# within 5 s nothing is left, its ciuic-bench runs included, and no profile is written.
if [ "${skipped:-0}" -eq 0 ]; then
  cp "$gate_db" "$work/orphan.db"
  port=$(free_port)
  /usr/bin/python3 -m torch.distributed.run --no_python --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$port" --redirects 2 --tee 2 --log_dir "$work/orphan-logs" "$tune" "${study[@]}" \
    --db "$work/orphan.db" --out "$work/orphan.profile.json" > "$work/orphan.log" 2>&1 &
  agent=$!
  for _ in $(seq 1 300); do grep -q "^measure: ciuic-bench on the 2 ranks" "$work/orphan.log" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  opids=$(pgrep -P "$agent" | tr '\n' ' ')
  kill -KILL "$agent"
  wait "$agent" 2>/dev/null
  start=$(date +%s)
  left="$work/orphan"
  for p in $opids; do left="$left|ciuic_tune_${p}_"; done
  for _ in $(seq 1 50); do pgrep -f "$left" > /dev/null || break; sleep 0.1; done
  want="its launcher (torchrun, pid $agent) has ended; ending this rank"
  logs=$(find "$work/orphan-logs" -name stderr.log | sort)
  said=0
  for f in $logs; do grep -q "rank [01] of 2: $want" "$f" && said=$((said + 1)); done
  if pgrep -f "$left" > /dev/null; then
    echo "tune_launch_test: torchrun SIGKILLed: processes left after 5 s:"; pgrep -af "$left"; fail=1
    pkill -KILL -f "$left"
  elif [ "$said" -ne 2 ] || ! grep -q "interrupted (SIGTERM)" $logs || [ -e "$work/orphan.profile.json" ]; then
    echo "tune_launch_test: torchrun SIGKILLed: expected each rank to say '$want' ($said did), rank 0 'interrupted (SIGTERM)', no profile:"
    tail -n 3 $logs; fail=1
  else
    echo "tune_launch_test: torchrun SIGKILLed: every rank ended within $(( $(date +%s) - start )) s: $(cat $logs | grep -o -m 1 "rank [01] of 2: $want")"
  fi
fi

[ "$fail" -eq 0 ] || exit 1
[ "${skipped:-0}" -eq 1 ] && exit 77
echo "tune_launch_test: passed"
