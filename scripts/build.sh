#!/usr/bin/env bash
# Configures and builds the default preset into build/ (used by test.sh and quickstart.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset default >/dev/null
cmake --build build -j "$(nproc)"
