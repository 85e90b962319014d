#!/usr/bin/env bash
# Fault matrix for ciuic-bench's deadlines: one rank of a self-launched run is stopped (SIGSTOP),
# killed (SIGKILL) or terminated (SIGTERM) while the collective runs, for {2, 3} ranks x {mpi, ciuic}
# backends. Every case must end with exit 2 within 2x the timeout (plus 1 s), and name the rank by
# its pid: a stopped rank is named by the rank that timed out, a dead one by the launcher (the rank
# whose heartbeats stopped first). Prints one row per case; exits 1 if any case fails.
# Usage: fault_matrix.sh CIUIC_BENCH [TIMEOUT_S]
set -u
bench=$1
timeout_s=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'pkill -CONT -f "$work" 2>/dev/null; pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
failures=0
printf '%-8s %-6s %-5s %8s %5s %-7s %s\n' signal backend ranks seconds exit culprit verdict
for sig in STOP KILL TERM; do
  for backend in mpi ciuic; do
    for ranks in 2 3; do
      tag="$work/case-$sig-$backend-$ranks"  # in the command line, so this case's ranks can be found
      "$bench" allreduce --backend "$backend" --ranks "$ranks" --sizes 256K --iters 1000000 \
        --timeout "$timeout_s" --inplace no --out "$tag.json" --format json >/dev/null 2>"$tag.err" &
      launcher=$!
      victim=""
      for _ in $(seq 1 100); do  # wait until every rank runs, then pick the last one
        mapfile -t pids < <(pgrep -f -- "--out $tag.json" | grep -v "^$launcher\$")
        if [ "${#pids[@]}" -ge $((ranks + 1)) ]; then victim=${pids[-1]}; break; fi
        sleep 0.1
      done
      sleep 1
      start=$(date +%s.%N)
      [ -n "$victim" ] && kill -"$sig" "$victim" 2>/dev/null
      # a hung case is ended after 4x the timeout and counts as failed
      for _ in $(seq 1 $((timeout_s * 40))); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$launcher" 2>/dev/null; then kill -KILL "$launcher"; fi
      wait "$launcher"
      code=$?
      secs=$(echo "$(date +%s.%N) - $start" | bc)
      [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
      named=no
      grep -q "(pid $victim)" "$tag.err" 2>/dev/null && named=yes
      ok=yes
      [ "$code" -eq 2 ] || ok=no
      awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= 2 * t + 1) }' || ok=no
      [ "$named" = yes ] || ok=no
      [ -n "$victim" ] || ok=no
      printf '%-8s %-6s %-5s %8.1f %5s %-7s %s\n' "$sig" "$backend" "$ranks" "$secs" "$code" "$named" "$ok"
      if [ "$ok" != yes ]; then
        failures=$((failures + 1))
        sed 's/^/    /' "$tag.err" | tail -n 5
      fi
    done
  done
done
echo "fault matrix: $failures failing case(s)"
[ "$failures" -eq 0 ]
