#!/usr/bin/env bash
# The multi-host lab in CI: 2 hosts x 2 ranks behind a 1 Gbit/s link. Every backend this build has
# runs its collectives at small sizes with exact verification across the two hosts (ciuic's ring and
# hier, hier with a codec on the inter-host step, Gloo when built); the hosts are found by name; the
# same ranks started as a torchrun job's (gloo and ciuic over the job's store, no mpiexec; a rank
# killed on one host named by the survivors on both); then
# the lab's failure paths (a failing command, an interrupted lab, bad options). After each lab: no
# namespace, /etc/netns entry, interface or process of it is left. And the tuner refuses to measure
# the lab's topology (cluster_lab) from outside it.
#   tests/scripts/cluster_lab_test.sh BUILD/bin/ciuic-bench
# Exit 77 (skipped) without root or without ip/tc/unshare.
set -uo pipefail
bench=${1:?usage: cluster_lab_test.sh CIUIC_BENCH}
bench=$(cd "$(dirname "$bench")" && pwd)/$(basename "$bench")
lab="$(cd "$(dirname "$0")/../.." && pwd)/scripts/cluster-lab.sh"
if [ "$(id -u)" -ne 0 ]; then echo "cluster-lab test: skipped (needs root)"; exit 77; fi
for t in ip tc unshare mpiexec; do
  command -v "$t" >/dev/null || { echo "cluster-lab test: skipped ($t missing)"; exit 77; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CIUIC_TIMEOUT=60
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

links_before=$(ip -o link | awk '{print $2}')
# Nothing of any lab may remain: namespaces, /etc/netns entries, root-namespace interfaces, processes.
check_clean() {
  local what=$1
  ip netns list | grep -q 'ciuic-lab-' && fail "$what: a lab namespace is left: $(ip netns list | grep ciuic-lab- | tr '\n' ' ')"
  ls /etc/netns 2>/dev/null | grep -q 'ciuic-lab-' && fail "$what: an /etc/netns entry is left"
  [ "$(ip -o link | awk '{print $2}')" = "$links_before" ] || fail "$what: the root namespace's interfaces changed"
  # Processes started as ciuic-bench (this script's own command line names it as an argument).
  pgrep -f "^$bench( |\$)" >/dev/null && fail "$what: a ciuic-bench process is left: $(pgrep -af "^$bench( |\$)" | head -3)"
  pgrep -f 'orted.*10\.213\.' >/dev/null && fail "$what: an orted of the lab is left"
  pgrep -f 'sleep 60$' >/dev/null && fail "$what: the interrupted command is left"
  true
}

# 1. Every backend across the two hosts, in one lab. --run: each ciuic-bench self-launches its 4 ranks
#    with mpiexec, which the lab points at its hostfile (2 slots per host) and its rsh agent.
backends=$("$bench" list | sed -n 's/^backends: *//p')
cat >"$work/runs.sh" <<EOF
#!/bin/sh
b="$bench"
common="--ranks 4 --sizes 4K:256K:x8 -c 1 -w 1 -n 3"
for coll in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  echo "== mpi \$coll"; \$b \$coll --backend mpi \$common || echo "RC=\$?"
done
echo "== ciuic ring"; \$b allreduce --backend ciuic --algo ring \$common || echo "RC=\$?"
echo "== ciuic hier"; \$b allreduce --backend ciuic --algo hier \$common || echo "RC=\$?"
echo "== ciuic hier int8"; \$b allreduce --backend ciuic --algo hier --codec int8 \$common || echo "RC=\$?"
case "$backends" in *gloo*)
  for coll in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
    echo "== gloo \$coll"; \$b \$coll --backend gloo \$common || echo "RC=\$?"
  done
  echo "== ciuic over gloo hier"; \$b allreduce --backend ciuic --transport gloo --algo hier \$common || echo "RC=\$?"
  ;;
esac
EOF
chmod +x "$work/runs.sh"
start=$SECONDS
"$lab" --hosts 2 --ranks-per-host 2 --rate 1gbit --run -- "$work/runs.sh" >"$work/out" 2>&1
rc=$?
echo "lab run: exit $rc in $((SECONDS - start)) s"
[ "$rc" -eq 0 ] || fail "the lab run exited $rc"
grep -q "RC=" "$work/out" && fail "a run failed: $(grep -B3 'RC=' "$work/out" | head -20)"
runs=$(grep -c '^== ' "$work/out")
ok=$(grep -c '^# Out of bounds values : 0 OK' "$work/out")
[ "$runs" -ge 10 ] && [ "$ok" -eq "$runs" ] || fail "$ok of $runs runs verified exactly (0 out of bounds)"
hosts_lines=$(grep -c '^# hosts: labhost0 (2 ranks) labhost1 (2 ranks)' "$work/out")
[ "$hosts_lines" -eq "$runs" ] || fail "$hosts_lines of $runs runs saw the two lab hosts by name"
grep -q '      hier' "$work/out" || fail "no hier row"
echo "lab run: $runs runs, $ok verified exactly, each on labhost0 and labhost1 ($backends)"
check_clean "after the run"

# 1b. ciuic-bench as the ranks of a torchrun job across the hosts (cluster-lab.sh --torch: one process
#     per rank with torchrun's variables, MASTER_ADDR on labhost0): one 4-rank world over the job's
#     TCP store, no mpiexec, every row exact, both hosts named.
case "$backends" in *gloo*)
  torch_runs=0
  for args in "allreduce --backend gloo" "allgather --backend gloo" "allreduce --backend ciuic --algo hier" \
              "allreduce --backend ciuic --algo ring --codec int8"; do
    # shellcheck disable=SC2086
    "$lab" --hosts 2 --ranks-per-host 2 --rate 1gbit --torch -- "$bench" $args --sizes 4K:256K:x8 -c 1 -w 1 -n 3 \
      >"$work/torch.out" 2>&1
    rc=$?
    torch_runs=$((torch_runs + 1))
    if [ "$rc" -ne 0 ]; then
      fail "under --torch, $args: exit $rc: $(tail -n 5 "$work/torch.out")"
    elif [ "$(grep -c '^# Out of bounds values : 0 OK' "$work/torch.out")" -ne 1 ] ||
         ! grep -q '^# hosts: labhost0 (2 ranks) labhost1 (2 ranks)' "$work/torch.out" ||
         ! grep -q '  ranks 4 ' "$work/torch.out"; then
      fail "under --torch, $args: not one exact 4-rank report naming both hosts: $(head -n 12 "$work/torch.out")"
    fi
    grep -q 'mpiexec' "$work/torch.out" && fail "under --torch, $args: mpiexec was started"
    check_clean "after --torch $args"
  done
  # The ranks took the job's path, not MPI's: a wrong --ranks is refused in the job's words.
  "$lab" --hosts 2 --ranks-per-host 2 --torch -- "$bench" allreduce --backend gloo --ranks 3 --sizes 4K \
    >"$work/torch.out" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "--ranks 3 but torchrun started 4 rank(s)" "$work/torch.out" ||
    fail "under --torch, --ranks 3: exit $rc, not refused as a torchrun job: $(tail -n 3 "$work/torch.out")"
  check_clean "after --torch --ranks 3"
  # A rank killed mid-run on the other host: each survivor, on either host, names it (the job's store
  # on labhost0 saw its connection close; gloo itself gives only a socket's address), before the
  # launcher ends them 2 s later, also a survivor that waited on rank 0 and not on rank 3.
  "$lab" --hosts 2 --ranks-per-host 2 --torch -- env CIUIC_FAULT=collective:3:kill:3 "$bench" allreduce \
    --backend gloo --sizes 256K -n 20 -w 1 --timeout 10 >"$work/torch.out" 2>&1
  rc=$?
  named=$(grep -c "rank 3 is gone: its connection to the job's store closed" "$work/torch.out")
  if [ "$rc" -eq 0 ] || [ "$named" -ne 3 ] || grep -v "rank 3 is gone" "$work/torch.out" | grep -q "is gone"; then
    fail "under --torch, rank 3 killed: exit $rc, $named of 3 survivors named it: $(grep 'ciuic-bench' "$work/torch.out" | tail -n 6)"
  fi
  check_clean "after --torch with rank 3 killed"
  echo "lab torch-launched runs: $torch_runs, each one 4-rank world on labhost0 and labhost1 (torchrun's path)"
  ;;
esac

# 2. A failing command: its exit code, and the lab removed.
"$lab" --hosts 2 --ranks-per-host 1 --run -- sh -c 'exit 7' >/dev/null 2>&1
rc=$?
[ "$rc" -eq 7 ] || fail "a command exiting 7 made the lab exit $rc"
check_clean "after a failing command"

# 3. Interrupted while the ranks run, by SIGINT to the lab script alone (a background job of a script
#    starts with SIGINT ignored: python3 restores the default first, as a terminal's Ctrl-C would find
#    it), then by SIGTERM: removed within seconds either way.
for sig in INT TERM; do
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  "$lab" --hosts 2 --ranks-per-host 1 -- sleep 60 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do ip netns list | grep -q 'ciuic-lab-' && pgrep -x sleep >/dev/null && break; sleep 0.1; done
sleep 1
kill -"$sig" "$pid"
t0=$SECONDS
wait "$pid"
rc=$?
[ "$rc" -ne 0 ] || fail "a lab ended by SIG$sig exited 0"
[ $((SECONDS - t0)) -le 10 ] || fail "a lab ended by SIG$sig took $((SECONDS - t0)) s to end"
check_clean "after SIG$sig"
done

# 4. The tuner measures a cluster topology only where its ranks reach its hosts: outside the lab, the
#    first measured trial lands on one host and the study stops with one line, exit 1.
tune="$(dirname "$bench")/ciuic-tune"
if [ -x "$tune" ]; then
  CIUIC_DATA_DIR="$work/data" "$tune" run --topology cluster_lab --mode measure --target nccl --budget 1 \
    --db "$work/tune.db" --out "$work/lab.profile.json" >/dev/null 2>"$work/tune.err"
  rc=$?
  [ "$rc" -eq 1 ] && [ "$(wc -l <"$work/tune.err")" -eq 1 ] && grep -q "ran on 1 host(s)" "$work/tune.err" ||
    fail "a cluster_lab measure study outside the lab: exit $rc, stderr: $(cat "$work/tune.err")"
fi

# 5. Bad options: one line, exit 1, nothing made.
for bad in "--hosts 0" "--hosts x" "--ranks-per-host 0" "--rate fast" "--delay soon" "--loss 100" "--bogus"; do
  # shellcheck disable=SC2086
  "$lab" $bad -- true >"$work/bad" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] && [ "$(wc -l <"$work/bad")" -eq 1 ] || fail "cluster-lab $bad: exit $rc, $(wc -l <"$work/bad") line(s)"
done
"$lab" >"$work/bad" 2>&1
[ $? -eq 1 ] || fail "cluster-lab without a command did not exit 1"
check_clean "after bad options"

if [ "$failures" -gt 0 ]; then
  echo "cluster-lab test: $failures failure(s)"
  sed -n '1,200p' "$work/out"
  exit 1
fi
echo "cluster-lab test: passed"
