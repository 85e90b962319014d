#!/usr/bin/env bash
# Builds the `device` preset here and bundles what a GPU machine without compilers, MPI or network
# needs into build-device/bundle:
#   bin/     ciuic-bench, ciuic-tune, test_gpu
#   lib/     libciuic.so (the C API ciuic.torch loads), libnccl-tuner-ciuic.so (NCCL's tuner plugin),
#            and every shared library these use that is not glibc, libstdc++, libgcc, the NVIDIA
#            driver or NCCL (NCCL comes from the GPU machine's Python wheel; gpu-check.sh finds it)
#   python/  the ciuic Python package
#   share/ciuic/  the data the tools read (topologies, workloads, profiles, plot scripts)
#   nccl-tests/  all_reduce_perf, all_gather_perf, reduce_scatter_perf, when NCCL_TESTS_SRC names an
#            nccl-tests source tree (a fetched snapshot; it is built here, never committed)
# Usage: scripts/device/bundle.sh            (NCCL_TESTS_SRC=DIR scripts/device/bundle.sh)
# Also writes build-device/bundle.tar.xz, the archive to carry to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --preset device > /dev/null
cmake --build build-device -j "$(nproc)" --target ciuic-bench ciuic-tune test_gpu ciuic nccl-tuner-ciuic
out=build-device/bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/python"
cp build-device/bin/ciuic-bench build-device/bin/ciuic-tune build-device/tests/test_gpu "$out/bin/"
cp build-device/lib/libciuic.so build-device/lib/libnccl-tuner-ciuic.so "$out/lib/"
cp -r python/ciuic "$out/python/"
# The data the tools ship (topologies, workloads, profiles, the plot scripts), where ShareDir finds it
# beside the binaries: bin/../share/ciuic.
mkdir -p "$out/share/ciuic"
cp -rL profiles scripts "$out/share/ciuic/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
if [[ -n ${NCCL_TESTS_SRC:-} ]]; then
  # nccl-tests against the NCCL this machine has (the same major version as the wheel there), sm_90.
  nt=build-device/nccl-tests
  rm -rf "$nt" && cp -r "$NCCL_TESTS_SRC" "$nt"
  make -C "$nt" -j "$(nproc)" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr/local/cuda \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$nt.log" 2>&1 || { tail -n 20 "$nt.log"; exit 1; }
  mkdir -p "$out/nccl-tests"
  cp "$nt"/build/all_reduce_perf "$nt"/build/all_gather_perf "$nt"/build/reduce_scatter_perf "$out/nccl-tests/"
fi
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnccl\.so)'
lib_dir=$(cd "$out/lib" && pwd)
for exe in "$out"/bin/* "$out"/lib/libciuic.so "$out"/lib/libnccl-tuner-ciuic.so "$out"/nccl-tests/*; do
  [[ -e $exe ]] || continue
  ldd "$exe" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    # A library ldd already resolves into the bundle (through the executables' $ORIGIN/../lib) is there.
    [[ $(cd "$(dirname "$path")" && pwd -P) == "$(cd "$lib_dir" && pwd -P)" ]] && continue
    if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
  done
done
strip "$out"/bin/* "$out"/nccl-tests/* 2> /dev/null || true
# One archive to carry: the bundle itself (~58 MB with nccl-tests) is over the device tool's carry limit
# beside the tree; the archive is ~16 MB. There: tar xJf build-device/bundle.tar.xz -C build-device.
tar cJf build-device/bundle.tar.xz -C build-device bundle
echo "bundle: $(du -sh "$out" | cut -f1) in $out; $(du -sh build-device/bundle.tar.xz | cut -f1) in build-device/bundle.tar.xz"
ls "$out/bin" "$out/lib" "$out/nccl-tests" 2> /dev/null || true
