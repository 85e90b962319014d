#!/usr/bin/env bash
# Every tracked shell script parses (bash -n), and the prepared GPU run (scripts/device/gpu-check.sh) is
# whole: each letter of its default step list, and each `step X` line, has its step_X function, so a
# script that only a GPU machine runs cannot reach one broken (its device time is short). Skips (77)
# outside a git checkout.
# Usage: scripts_check.sh SOURCE_DIR
set -u
cd "$1" || exit 1
files=$(git ls-files '*.sh' 2>/dev/null) || { echo "scripts_check: not a git checkout: skipped"; exit 77; }
bad=0
for f in $files; do
  out=$(bash -n "$f" 2>&1) || { echo "scripts_check: $f does not parse: $out"; bad=1; }
done
gpu=scripts/device/gpu-check.sh
defaults=$(sed -n 's/^want=\${2:-\([a-z]*\)}$/\1/p' "$gpu")
[ -n "$defaults" ] || { echo "scripts_check: $gpu: no default step list (want=\${2:-...})"; bad=1; }
steps=$(sed -n 's/^step \([a-z]\) [0-9][0-9]* .*-- bash -c step_\([a-z]\)$/\1\2/p' "$gpu")
for pair in $steps; do
  [ "${pair:0:1}" = "${pair:1:1}" ] || { echo "scripts_check: $gpu: step ${pair:0:1} runs step_${pair:1:1}"; bad=1; }
  grep -q "^step_${pair:0:1}() {" "$gpu" || { echo "scripts_check: $gpu: step ${pair:0:1} has no step_${pair:0:1}()"; bad=1; }
done
for ((i = 0; i < ${#defaults}; i++)); do
  l=${defaults:i:1}
  grep -q "^step $l " "$gpu" || { echo "scripts_check: $gpu: default step $l has no step line"; bad=1; }
done
n=$(wc -w <<<"$files")
[ "$bad" -eq 0 ] && echo "scripts_check: $n scripts parse; $gpu: default steps $defaults each defined"
exit "$bad"
