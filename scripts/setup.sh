#!/usr/bin/env bash
# Installs every Debian package ciuic needs to build and test. Idempotent: does nothing when all
# are present. Works as root or through sudo. The CUDA toolkit (nvcc, NCCL, CUPTI) is optional and
# not installed here: where nvcc exists the build uses it.
set -euo pipefail

packages=(
  build-essential cmake git pkg-config
  libopenmpi-dev openmpi-bin
  libgloo-dev   # the gloo backend (--backend gloo, --transport gloo)
  libfmt-dev libcxxopts-dev libsqlite3-dev nlohmann-json3-dev libhwloc-dev
  libgtest-dev libbenchmark-dev
  iproute2 python3 bc procps sqlite3   # bc, procps, sqlite3: tests/scripts/fault_matrix.sh
  clang   # libFuzzer harnesses (scripts/fuzz.sh, the sanitizer stage of scripts/test.sh)
  clang-format   # unit.format: the tree follows .clang-format
  python3-torch   # tests/python: DDP export and the ciuic comm hook under PyTorch (gloo)
  # Debian's torch calls the system BLAS; without OpenBLAS that is the reference BLAS, about 10x
  # slower on the training scripts' matrix products (a 1024x128x512 Linear: 56 vs 4.4 ms on one core).
  libopenblas0-pthread
  python3-sklearn python3-matplotlib   # the digits time-to-accuracy run (bench/results) and its plot
  python3-venv python3-pip python3-setuptools python3-wheel   # the install test: pip install ./python in a venv
  util-linux   # unshare: the install test hides the source tree in a mount namespace
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
