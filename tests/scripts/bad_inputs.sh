#!/usr/bin/env bash
# The bad-input corpus (tests/data/bad, written by its generate.py; ctest unit.bad_inputs). Every
# case of cases.tsv (CLI options of both tools, size lists, profile/topology/workload JSON, runtime
# state files, SQLite databases, output paths) must end with:
#   - exit code exactly 1: not 0 (accepted), 2 or 3, not killed by a signal, not hung (timeout 20 s);
#   - exactly one non-empty line on stderr, containing the case's expected text (the option and the
#     bad value or the reason, the JSON path with the file's name, the state-file field, the
#     database's file name);
#   - nothing on stdout (no table, no log of a run that should not have started);
#   - nothing created in or removed from its work folder (no output, database, -wal or temp file);
#   - every input file it names byte-identical (a refused database included).
# Good files lie beside the bad ones (profile/good.profile.json, topology/good.json,
# workload/good.json, state/good-*.state, db/good.db made here by ciuic-bench, and a copy of
# profiles/ as $CIUIC_PROFILES_DIR): controls first check that each is accepted, and at the end every
# file of the scratch copy must be byte-identical and none added or removed.
# Prints the cases per category and, for each failing case, its id, command, exit code and stderr;
# exits 1 if any case or check fails.
# Usage: bad_inputs.sh CIUIC_BENCH CIUIC_TUNE STATE_LOAD_DRIVER [CASE_DIR] [ID_REGEX]
#   CASE_DIR defaults to tests/data/bad; ID_REGEX (awk, on the id) runs a subset.
#   $BAD_INPUTS_JOBS: cases run at once (default 2); $BAD_INPUTS_LOGS=DIR keeps every case's output.
#   $BAD_INPUTS_GATE_DB: a database holding the accuracy gate's verdicts (gate seeds 1) that the
#   workload control's study starts from a copy of, so it does not train the gate (the sanitizer
#   stage: instrumented, the gate takes minutes); $BAD_INPUTS_CONTROL_TIMEOUT: that study's limit
#   (default 120 s).
set -u

# ---- a batch of cases (the main part below hands them out with xargs) ------------------------------
# Few processes per case: on a loaded 2-core machine every fork counts.
if [ "${1:-}" = --cases ]; then
  shift
  shopt -s globstar dotglob nullglob
  mapfile -t manifest <"$BAD_MANIFEST"
  # subst VAR TEXT: TEXT with its placeholders filled in, into VAR.
  subst() {
    local s=$2
    s=${s//\{bench\}/"$BAD_BENCH"}
    s=${s//\{tune\}/"$BAD_TUNE"}
    s=${s//\{driver\}/"$BAD_DRIVER"}
    s=${s//\{case_dir\}/"$BAD_SCRATCH/cases"}
    s=${s//\{profiles\}/"$BAD_SCRATCH/profiles"}
    s=${s//\{work\}/"$w"}
    printf -v "$1" '%s' "$s"
  }
  # names TEXT EXPECT: whether TEXT contains EXPECT: A, A&&B (all of them), A||B (one of them); && binds
  # looser, so A&&B||C is A and one of B or C (a reason a build words its own way: no NCCL here).
  names() {
    local text=$1 expect=$2 part
    if [[ "$expect" == *"&&"* ]]; then
      while [ -n "$expect" ]; do
        part=${expect%%&&*}
        if [ "$part" = "$expect" ]; then expect=""; else expect=${expect#*&&}; fi
        names "$text" "$part" || return 1
      done
      return 0
    elif [[ "$expect" == *"||"* ]]; then
      while [ -n "$expect" ]; do
        part=${expect%%||*}
        if [ "$part" = "$expect" ]; then expect=""; else expect=${expect#*||}; fi
        [[ "$text" == *"$part"* ]] && return 0
      done
      return 1
    fi
    [[ "$text" == *"$expect"* ]]
  }
  for n in "$@"; do
    IFS=$'\t' read -r id category expect setup command <<<"${manifest[n - 1]}"
    w="$BAD_SCRATCH/work/$id"
    # {own:REL}: a private copy of the corpus file REL (mtime kept), for a case that may damage it.
    own=() own_dir="$BAD_SCRATCH/own/$id"
    while [[ "$command" =~ \{own:([^}]*)\} ]]; do
      rel=${BASH_REMATCH[1]}
      [ ${#own[@]} -eq 0 ] && mkdir -p "$own_dir"
      cp -p "$BAD_SCRATCH/cases/$rel" "$own_dir/${rel##*/}"
      own+=("$own_dir/${rel##*/}=cases/$rel")
      command=${command//"{own:$rel}"/"$own_dir/${rel##*/}"}
    done
    subst expect "$expect"
    subst setup "$setup"
    subst command "$command"
    out="$BAD_SCRATCH/logs/$id.out" err="$BAD_SCRATCH/logs/$id.err" result="$BAD_SCRATCH/results/$id"
    problems=()
    cd "$w" || exit 2
    if [ "$setup" != - ] && ! bash -c "$setup" >/dev/null 2>&1; then
      problems+=("setup failed: $setup")
    fi
    before_work=("$w"/** "$own_dir"/*)
    # The inputs the command names and nobody has written yet (their mtime is older than the run's
    # marker): byte-identical afterwards. Written ones are compared with their originals, so a file
    # two cases share is blamed on the case that changed it.
    inputs=()
    for word in $command; do
      word=${word#\'} word=${word%\'}
      case $word in "$BAD_SCRATCH"/cases/* | "$BAD_SCRATCH"/profiles/* | "$own_dir"/*)
        [ -f "$word" ] && ! [ "$word" -nt "$BAD_SCRATCH/marker" ] && inputs+=("$word") ;;
      esac
    done
    # A study writes its profile into $CIUIC_DATA_DIR/profiles when --out is not given: watch that folder.
    profiles_before=() profile_files=()
    if [[ "$command" == "$BAD_TUNE run "* || "$command" == *" $BAD_TUNE run "* ]]; then
      profiles_before=("$BAD_SCRATCH"/data/profiles/*)
      for f in "${profiles_before[@]}"; do [ -f "$f" ] && ! [ "$f" -nt "$BAD_SCRATCH/marker" ] && profile_files+=("$f"); done
    fi
    t0=${EPOCHREALTIME/./}
    timeout -k 5 "$BAD_TIMEOUT" bash -c "$command" </dev/null >"$out" 2>"$err"
    rc=$?
    cs=$(((${EPOCHREALTIME/./} - t0) / 10000))
    printf -v secs '%d.%02d' $((cs / 100)) $((cs % 100))
    if [ "$rc" -eq 124 ]; then
      problems+=("hung: still running after ${BAD_TIMEOUT} s (timeout)")
    elif [ "$rc" -gt 128 ]; then
      problems+=("killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))")
    elif [ "$rc" -eq 0 ]; then
      problems+=("exit 0: the bad input was accepted")
    elif [ "$rc" -ne 1 ]; then
      problems+=("exit $rc (bad input must exit 1)")
    fi
    mapfile -t errlines <"$err"
    lines=${#errlines[@]}
    if [ "$lines" -ne 1 ]; then
      problems+=("$lines lines on stderr (one wanted)")
    elif [[ "${errlines[0]}" != *[![:space:]]* ]]; then
      problems+=("an empty line on stderr")
    fi
    printf -v errtext '%s\n' "${errlines[@]}"
    names "$errtext" "$expect" || problems+=("stderr does not name '$expect'")
    if [ -s "$out" ]; then
      problems+=("$(wc -c <"$out") bytes on stdout, first line: $(head -n1 "$out" | cut -c1-160 | cat -v)")
    fi
    after_work=("$w"/** "$own_dir"/*)
    if [ "${before_work[*]}" != "${after_work[*]}" ]; then
      created=$(comm -13 <(printf '%s\n' "${before_work[@]}" | sort) <(printf '%s\n' "${after_work[@]}" | sort) | tr '\n' ' ')
      gone=$(comm -23 <(printf '%s\n' "${before_work[@]}" | sort) <(printf '%s\n' "${after_work[@]}" | sort) | tr '\n' ' ')
      created=${created//$w\//} gone=${gone//$w\//}
      [ -n "$created" ] && problems+=("wrote files: ${created//$own_dir\//}")
      [ -n "$gone" ] && problems+=("removed files: ${gone//$own_dir\//}")
    fi
    if [ ${#profiles_before[@]} -gt 0 ]; then
      profiles_after=("$BAD_SCRATCH"/data/profiles/*)
      [ "${profiles_before[*]}" != "${profiles_after[*]}" ] && problems+=("added or removed files in \$CIUIC_DATA_DIR/profiles")
      for f in "${profile_files[@]}"; do
        [ "$f" -nt "$BAD_SCRATCH/marker" ] && ! cmp -s "$f" "$BAD_SCRATCH/originals/${f#"$BAD_SCRATCH"/}" &&
          problems+=("changed a file it was not given: ${f#"$BAD_SCRATCH"/} (\$CIUIC_DATA_DIR/profiles)")
      done
    fi
    for f in "${inputs[@]}"; do
      if [ "$f" -nt "$BAD_SCRATCH/marker" ]; then
        rel=${f#"$BAD_SCRATCH"/}
        for o in "${own[@]}"; do [ "${o%%=*}" = "$f" ] && rel=${o#*=}; done
        cmp -s "$f" "$BAD_SCRATCH/originals/$rel" || problems+=("changed an input file: ${f#"$BAD_SCRATCH"/} (from $rel)")
      fi
    done
    if [ ${#problems[@]} -eq 0 ]; then
      printf 'PASS\t%s\t%s\n' "$category" "$secs" >"$result"
    else
      {
        printf 'FAIL\t%s\t%s\n' "$category" "$secs"
        printf '  %s [%s]\n' "$id" "$category"
        printf '    command: %s\n' "$command"
        [ "$setup" != - ] && printf '    setup:   %s\n' "$setup"
        printf '    exit:    %s (after %s s)\n' "$rc" "$secs"
        for p in "${problems[@]}"; do printf '    problem: %s\n' "$p"; done
        if [ "$lines" -gt 0 ]; then
          printf '%s\n' "${errlines[@]:0:6}" | cut -c1-400 | cat -v | sed 's/^/    stderr:  /'
          [ "$lines" -gt 6 ] && printf '    stderr:  ... (%s lines)\n' "$lines"
        else
          printf '    stderr:  (empty)\n'
        fi
      } >"$result"
    fi
  done
  exit 0
fi

# ---- the run ---------------------------------------------------------------------------------------
if [ $# -lt 3 ]; then
  echo "usage: $0 CIUIC_BENCH CIUIC_TUNE STATE_LOAD_DRIVER [CASE_DIR] [ID_REGEX]" >&2
  exit 2
fi
start=${EPOCHREALTIME/./}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench=$(readlink -f "$1") tune=$(readlink -f "$2") driver=$(readlink -f "$3")
data=${4:-$repo/tests/data/bad}
only=${5:-}
for exe in "$bench" "$tune" "$driver"; do
  [ -x "$exe" ] || { echo "bad_inputs: $exe is not an executable" >&2; exit 2; }
done
[ -f "$data/cases.tsv" ] || { echo "bad_inputs: no $data/cases.tsv" >&2; exit 2; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ciuic-bad-inputs.XXXXXX") || exit 2
workload_control=""
cleanup() {
  [ -n "$workload_control" ] && kill "$workload_control" 2>/dev/null && wait "$workload_control" 2>/dev/null
  chmod -R u+rwX "$scratch" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir -p "$scratch/work" "$scratch/logs" "$scratch/results" "$scratch/control"
cp -R "$data" "$scratch/cases"
cp -R "$repo/profiles" "$scratch/profiles"

export BAD_BENCH=$bench BAD_TUNE=$tune BAD_DRIVER=$driver BAD_SCRATCH=$scratch BAD_TIMEOUT=20
export BAD_MANIFEST=$scratch/cases/cases.tsv
# Everything a tool reads from the environment is this run's: built-in topologies and workloads in the
# scratch copy of profiles/, the default database and profile folder in scratch/data, no deadline or
# fault injection from outside.
export CIUIC_PROFILES_DIR=$scratch/profiles CIUIC_DATA_DIR=$scratch/data
mkdir -p "$scratch/data/profiles"
unset CIUIC_TIMEOUT CIUIC_FAULT CIUIC_HEARTBEAT_DIR CIUIC_LAUNCHED_BY_BENCH CIUIC_BENCH_EXE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# ---- controls: the good files are accepted (else a bad case could fail for the wrong reason) -------
failed_controls=0
control() {
  local what=$1
  shift
  if ! (cd "$scratch/control" && timeout -k 5 60 "$@") </dev/null >"$scratch/logs/control.out" 2>"$scratch/logs/control.err"; then
    echo "control failed: $what: $*"
    sed 's/^/  stderr: /' "$scratch/logs/control.err" | head -n 5
    failed_controls=$((failed_controls + 1))
  fi
}
C=$scratch/cases
control "a good database (made by ciuic-bench)" "$bench" allreduce --backend local --sizes 4K --iters 1 --warmup 0 --db "$C/db/good.db"
control "the good database, read by ciuic-tune" "$tune" show --db "$C/db/good.db"
control "a good profile" "$tune" export --profile "$C/profile/good.profile.json" --format json
control "a good topology" "$tune" model --topology "$C/topology/good.json" --sizes 1K
control "a good int8 state" "$driver" ring int8 400 "$C/state/good-int8.state"
control "a good int8 state of format 2 (checksummed)" "$driver" ring int8 400 "$C/state/good-int8-v2.state"
control "a good powersgd state" "$driver" powersgd powersgd:2 400 "$C/state/good-powersgd.state"
control "a good sign2 state" "$driver" sign2 sign1 400 "$C/state/good-sign2.state"
control "a good topk state" "$driver" sparse topk:0.1 400 "$C/state/good-topk.state"
# The workload's control is a whole (small) study: it runs beside the cases.
if [ -n "${BAD_INPUTS_GATE_DB:-}" ]; then
  mkdir -p "$scratch/control" && cp "$BAD_INPUTS_GATE_DB" "$scratch/control/w.db"
fi
timeout -k 5 "${BAD_INPUTS_CONTROL_TIMEOUT:-120}" "$tune" run --topology dgx_a100 --workload "$C/workload/good.json" \
  --strategy random --budget 2 --gate-seeds 1 \
  --db "$scratch/control/w.db" --out "$scratch/control/w.json" </dev/null >"$scratch/logs/control-workload.out" 2>&1 &
workload_control=$!

snapshot() {
  (cd "$scratch" && find cases profiles \( -type f -o -type l \) -print0 | sort -z | xargs -0 sha256sum)
  (cd "$scratch" && find cases profiles -print | sort)
}
snapshot >"$scratch/before.txt"
mkdir -p "$scratch/originals" && cp -R "$scratch/cases" "$scratch/profiles" "$scratch/originals/"
touch "$scratch/marker"  # inputs written from now on are newer (bash compares mtimes in ns)

# ---- the cases -------------------------------------------------------------------------------------
# Cases that would run long if a bad value were accepted (a study, a validation, the topologies'
# table, a FIFO) go first, so they overlap the many quick ones instead of ending the run.
awk -F'\t' -v only="$only" '!/^#/ && NF >= 5 && (only == "" || $1 ~ only) {
    slow = $5 ~ /\{tune\} (run|validate|topologies)/ || $4 ~ /mkfifo/
    print (slow ? 0 : 1), NR, $1, $2
  }' "$BAD_MANIFEST" | sort -s -n -k1,1 >"$scratch/order.txt"
if [ ! -s "$scratch/order.txt" ]; then
  echo "bad_inputs: no case in $BAD_MANIFEST${only:+ matches '$only'}" >&2
  exit 1
fi
(cd "$scratch/work" && cut -d' ' -f3 "$scratch/order.txt" | xargs mkdir)
cut -d' ' -f2 "$scratch/order.txt" | xargs -P "${BAD_INPUTS_JOBS:-2}" -n 4 "$here/bad_inputs.sh" --cases
wait "$workload_control"
workload_rc=$?
workload_control=""
if [ "$workload_rc" -ne 0 ]; then
  echo "control failed: a good workload: $tune run --topology dgx_a100 --workload $C/workload/good.json ..."
  tail -n 5 "$scratch/logs/control-workload.out" | sed 's/^/  output: /'
  failed_controls=$((failed_controls + 1))
fi

# ---- the verdict -----------------------------------------------------------------------------------
snapshot >"$scratch/after.txt"
# One line per case, in manifest order: id category verdict seconds.
sort -n -k2,2 "$scratch/order.txt" | while read -r _ _ id category; do
  if [ -f "$scratch/results/$id" ]; then
    IFS=$'\t' read -r verdict _ secs <"$scratch/results/$id"
    echo "$id $category $verdict $secs"
  else
    echo "$id $category LOST 0"
  fi
done >"$scratch/verdicts.txt"
failed=$(awk '$3 != "PASS"' "$scratch/verdicts.txt" | wc -l)
total=$(wc -l <"$scratch/verdicts.txt")
if [ "$failed" -gt 0 ]; then
  echo "failing cases:"
  awk '$3 != "PASS" { print $1 }' "$scratch/verdicts.txt" | while read -r id; do
    if [ -f "$scratch/results/$id" ]; then
      tail -n +2 "$scratch/results/$id"
    else
      echo "  $id: no result (its batch of cases died)"
    fi
  done
fi
integrity=0
if ! cmp -s "$scratch/before.txt" "$scratch/after.txt"; then
  integrity=1
  echo "files of the scratch copy changed, appeared or disappeared during the cases (good and bad inputs alike):"
  diff "$scratch/before.txt" "$scratch/after.txt" | grep '^[<>]' | sed 's/^/  /' | head -n 40
fi
echo "bad inputs: the slowest cases (s):"
sort -k4,4 -rn "$scratch/verdicts.txt" | head -n 5 | awk '{ printf "  %6s  %s (%s)\n", $4, $1, $3 }'
echo "bad inputs: per category (passed/cases):"
awk '{ n[$2]++; if ($3 == "PASS") p[$2]++; if (!($2 in seen)) { seen[$2] = 1; order[++k] = $2 } }
  END { for (i = 1; i <= k; i++) { c = order[i]; printf "  %-10s %4d/%-4d%s\n", c, p[c], n[c], (p[c] < n[c] ? sprintf("  (%d failed)", n[c] - p[c]) : "") } }' \
  "$scratch/verdicts.txt"
goods=$(cd "$scratch" && find cases/*/good* profiles -type f | wc -l)
if [ "$integrity" -eq 0 ]; then
  echo "bad inputs: $goods good files (and every bad one) byte-identical, nothing added or removed"
fi
cs=$(((${EPOCHREALTIME/./} - start) / 10000))
echo "bad inputs: $((total - failed)) of $total cases passed, $failed failed, $failed_controls control(s) failed," \
  "$((cs / 100)).$((cs % 100 / 10)) s"
if [ -n "${BAD_INPUTS_LOGS:-}" ]; then  # keep every case's stdout, stderr and verdict
  mkdir -p "$BAD_INPUTS_LOGS" && cp -R "$scratch/logs" "$scratch/results" "$scratch/verdicts.txt" "$BAD_INPUTS_LOGS/"
fi
[ "$failed" -eq 0 ] && [ "$integrity" -eq 0 ] && [ "$failed_controls" -eq 0 ]
