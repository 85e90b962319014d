#!/usr/bin/env bash
# Configures build-fuzz/, the one instrumented tree both scripts/fuzz.sh (its libFuzzer harnesses) and
# the sanitizer stage of scripts/test.sh (its ASan + UBSan tests and tools) build: clang, ASan + UBSan
# and libFuzzer's coverage, CUDA off, MPI on, -O1 with line tables only (reports keep file:line). The
# test sources are built without the coverage (CIUIC_TEST_COMPILE_OPTIONS: nothing fuzzes them), and
# every target as a unity build (CMAKE_UNITY_BUILD: a few sources per compiler run, so the JSON, fmt
# and standard-library code they all instantiate is compiled and instrumented once per batch, not once
# per source). Prints nothing on success.
# Usage: scripts/fuzz_tree.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-fuzz -DCIUIC_FUZZ=ON -DCIUIC_CUDA=OFF -DCIUIC_MPI=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  -DCIUIC_TEST_COMPILE_OPTIONS=-fno-sanitize=fuzzer-no-link -DCMAKE_UNITY_BUILD=ON >/dev/null
