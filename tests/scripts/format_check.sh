#!/usr/bin/env bash
# The tree follows .clang-format: every tracked C, C++ and CUDA file is as clang-format would write it.
# Names each file that differs and how to fix it. Skips (77) outside a git checkout or without
# clang-format (scripts/setup.sh installs it).
# Usage: format_check.sh SOURCE_DIR
set -u
cd "$1" || exit 1
command -v clang-format >/dev/null || { echo "format_check: no clang-format (scripts/setup.sh installs it): skipped"; exit 77; }
files=$(git ls-files '*.c' '*.cc' '*.h' '*.cu' '*.cuh' 2>/dev/null) || { echo "format_check: not a git checkout: skipped"; exit 77; }
[ -n "$files" ] || { echo "format_check: no tracked sources: skipped"; exit 77; }
bad=()
for f in $files; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format_check: ${#bad[@]} of $(echo "$files" | wc -w) files differ from .clang-format ($(clang-format --version | head -n 1)):"
  printf '  %s\n' "${bad[@]}"
  echo "format_check: fix with: clang-format -i FILE..., or git clang-format for changed lines"
  exit 1
fi
echo "format_check: $(echo "$files" | wc -w) files follow .clang-format"
