#!/usr/bin/env bash
# Configures and builds the default preset into build/ (used by test.sh and quickstart.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# A unity build (CMAKE_UNITY_BUILD): a few sources per compiler run, so the JSON, fmt and standard-library
# code they all instantiate is compiled once per batch; a fresh machine builds it sooner. CIUIC_UNITY=OFF
# for one compiler run per source (quicker rebuilds after editing one file).
cmake --preset default -DCMAKE_UNITY_BUILD="${CIUIC_UNITY:-ON}" >/dev/null
cmake --build build -j "$(nproc)"
