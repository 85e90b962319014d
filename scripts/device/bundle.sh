#!/usr/bin/env bash
# Builds the `device` preset and bundles what a GPU machine without compilers or MPI needs into
# build-device/bundle: bin/ (ciuic-bench, ciuic-tune, test_gpu), lib/ (every shared library the executables use
# that is not glibc, libstdc++, libgcc, the NVIDIA driver or NCCL), and the scripts. NCCL comes from
# the GPU machine's Python wheel at run time (scripts/device/gpu-check.sh finds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --preset device >/dev/null
cmake --build build-device -j "$(nproc)" --target ciuic-bench ciuic-tune test_gpu
out=build-device/bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp build-device/bin/ciuic-bench build-device/bin/ciuic-tune build-device/tests/test_gpu "$out/bin/"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnccl\.so)'
for exe in "$out"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/"; fi
  done
done
strip "$out"/bin/* 2>/dev/null || true
echo "bundle: $(du -sh "$out" | cut -f1) in $out"; ls "$out/bin" "$out/lib"
