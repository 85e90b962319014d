#!/bin/sh
# Runs a command and passes only when it exits 0 AND its output matches an extended regular
# expression: ctest's PASS_REGULAR_EXPRESSION alone ignores the exit code.
# Usage: expect_output.sh REGEX COMMAND [ARGS...]
regex=$1
shift
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
rc=$?
cat "$log"
if [ "$rc" -ne 0 ]; then
  echo "expect_output: command exited $rc" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" "$log"; then
  echo "expect_output: output does not match /$regex/" >&2
  exit 1
fi
