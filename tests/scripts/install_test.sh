#!/usr/bin/env bash
# The installed tree stands alone. cmake --install BUILD to a temporary prefix; then, in a private
# mount namespace where the source tree (and the build tree inside it) is hidden behind an empty
# tmpfs, from another directory: ciuic-bench (a run with a shipped baseline by name, a moved copy of the
# prefix self-launching 2 ranks under mpiexec, a plot), ciuic-micro (2 ranks under mpiexec),
# ciuic-tune (a model-mode study on a shipped topology and workload, an export; a copy of it alone, finding
# the data through $CIUIC_DATA_DIR) and the Python package
# (the prefix's site-packages, and a venv made by `pip install --no-build-isolation`), each loading the
# prefix's libciuic; under /usr/local and /usr (DESTDIR) the package on Debian's path and ciuic-bench kernel
# finding its PyTorch timer there. Exit 77 (skip) where no mount namespace can be made (not root, or a container
# that forbids it): the reason is printed.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
case "$build" in "$src"/*) ;; *) echo "install_test: the build tree must lie inside the source tree"; exit 1 ;; esac
if ! why=$(unshare -m true 2>&1); then
  echo "skip: cannot make a mount namespace (unshare -m): $why"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
# pip builds from a copy (setuptools writes build/ and *.egg-info beside the sources).
cp -r "$src/python" "$work/pysrc"
rm -rf "$work/pysrc/ciuic/__pycache__"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-build-isolation --no-index --quiet "$work/pysrc" > "$work/pip.log" 2>&1 ||
  { cat "$work/pip.log"; exit 1; }
site=$(ls -d "$prefix"/lib/python3*/site-packages)
# Every installed ELF file runs from a copied tree: its run path starts at $ORIGIN/../lib and holds the
# folder of each library it needs from outside the loader's default folders (CUDA, NCCL, Open MPI),
# so ld.so.conf is not what makes it load.
# ciuic-micro where the build has it (Google Benchmark found; scripts/setup.sh installs it).
micro=()
[ ! -x "$build/bin/ciuic-micro" ] || micro=("$prefix/bin/ciuic-micro")
for elf in "$prefix"/bin/ciuic-bench "$prefix"/bin/ciuic-tune "${micro[@]}" "$prefix"/lib/lib*.so; do
  runpath=$(readelf -d "$elf" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  case ":$runpath:" in *':$ORIGIN/../lib:'*) ;; *) echo "install_test: $elf: run path '$runpath' lacks \$ORIGIN/../lib"; exit 1 ;; esac
  ldd "$elf" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | while read -r lib; do
    dir=$(dirname "$lib")
    case "$dir" in /lib | /usr/lib | /lib/x86_64-linux-gnu | /usr/lib/x86_64-linux-gnu | /lib64 | /usr/lib64) continue ;; esac
    real=$(readlink -f "$dir")
    found=0
    IFS=: read -ra entries <<< "$runpath"
    for e in "${entries[@]}"; do [ -n "$e" ] && [ "$(readlink -f "${e/\$ORIGIN/$(dirname "$elf")}")" = "$real" ] && found=1; done
    [ "$found" -eq 1 ] || { echo "install_test: $elf needs $lib, whose folder is not in its run path '$runpath'"; exit 1; }
  done || exit 1
done
echo "install_test: run paths hold \$ORIGIN/../lib and every non-system library folder"
# Under /usr/local (and /usr) the package goes where Debian's Python looks (DESTDIR: nothing leaves $work).
for system in /usr/local /usr; do
  DESTDIR="$work/destdir" cmake --install "$build" --prefix "$system" >/dev/null
  pkg=$(cd "$work/destdir" && ls -d ."$system"/lib/python3*/dist-packages/ciuic 2>/dev/null | head -n 1)
  pkg=${pkg#.}
  [ -n "$pkg" ] || { echo "install_test: --prefix $system: no ciuic package under a dist-packages folder"; exit 1; }
  /usr/bin/python3 - "$(dirname "$pkg")" "$work/destdir$pkg" <<'PY'
import os, sys
folder, pkg = sys.argv[1], sys.argv[2]
if folder not in sys.path:
    raise SystemExit(f"install_test: {folder} is not on /usr/bin/python3's path {sys.path}")
ns = {}
exec(open(os.path.join(pkg, "_installed.py")).read(), ns)
lib = os.path.normpath(os.path.join(pkg, ns["LIBRARY_DIR"], "libciuic.so"))
if not os.path.isfile(lib):
    raise SystemExit(f"install_test: {pkg}/_installed.py points at {lib}, which is not there")
print(f"install_test: --prefix {folder.split('/lib/')[0]}: the package in {folder}, on Debian's path; it finds libciuic")
PY
  # ciuic-bench kernel finds the package's PyTorch timer (kernel_bench.py) in that dist-packages folder.
  "$work/destdir$system/bin/ciuic-bench" kernel bias-relu --shape 64x128 --iters 1 > "$work/kernel.txt" 2>&1 ||
    { cat "$work/kernel.txt"; exit 1; }
  if grep -q "kernel_bench.py not found" "$work/kernel.txt"; then
    echo "install_test: --prefix $system: ciuic-bench kernel did not find the installed kernel_bench.py"
    exit 1
  fi
  rm -rf "$work/destdir"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unshare -m env -i PATH=/usr/bin:/bin HOME="$work" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  bash -eu -c '
  src=$1 work=$2 prefix=$3 site=$4 has_micro=$5
  mount -t tmpfs none "$src"
  [ -z "$(ls -A "$src")" ] || { echo "the source tree is still visible"; exit 1; }
  cd "$work"
  step() { echo "install_test: $*"; }
  step "ciuic-bench with a shipped baseline"
  "$prefix/bin/ciuic-bench" allreduce --backend local --sizes 4K:64K --iters 2 --warmup 1 --baseline dgx_a100 \
    --format json --out run.json > bench.txt
  grep -q "dgx_a100" run.json
  step "a moved copy of the prefix: ciuic-bench starting 2 ranks under mpiexec itself"
  cp -a "$prefix" moved
  moved/bin/ciuic-bench allreduce --sizes 4K:64K --iters 2 --warmup 1 --format json --out moved.json > moved.txt 2>&1 ||
    { cat moved.txt; exit 1; }
  grep -q "starting 2 ranks: .*mpiexec" moved.txt || { cat moved.txt; exit 1; }
  /usr/bin/python3 -c "import json, sys; j = json.load(open(\"moved.json\")); sys.exit(0 if j[\"context\"][\"world_size\"] == 2 and all(r[\"wrong\"] == 0 for r in j[\"results\"]) else 1)"
  rm -rf moved
  if [ "$has_micro" = 1 ]; then
    step "ciuic-micro: the runtime'"'"'s cost per call under mpiexec"
    mpiexec -n 2 "$prefix/bin/ciuic-micro" --benchmark_filter="Overhead/(Transport|Runtime)/8/" > micro.txt 2>&1 ||
      { cat micro.txt; exit 1; }
    grep -qE "^Overhead/Transport/8/" micro.txt && grep -qE "^Overhead/Runtime/8/" micro.txt || { cat micro.txt; exit 1; }
  fi
  step "ciuic-bench plot"
  "$prefix/bin/ciuic-bench" plot busbw run.json --out busbw.png > plot.txt 2>&1 || { cat plot.txt; exit 1; }
  [ -s busbw.png ]
  step "ciuic-tune run on a shipped topology and workload"
  "$prefix/bin/ciuic-tune" run --topology dgx_a100 --workload resnet50 --budget 20 --gate-seeds 1 --accumulation 1 --db tune.db \
    --out a100.profile.json > tune.txt 2>&1 || { tail -5 tune.txt; exit 1; }
  [ -s a100.profile.json ]
  step "a ciuic-tune copied on its own finds the shipped data through \$CIUIC_DATA_DIR, and says where it looked"
  mkdir alone && cp "$prefix/bin/ciuic-tune" alone/
  if alone/ciuic-tune model --topology dgx_a100 > alone.txt 2>&1; then echo "found data without being told"; exit 1; fi
  grep -q "looked in $work/share/ciuic/profiles/topologies" alone.txt || { cat alone.txt; exit 1; }
  CIUIC_DATA_DIR="$prefix/share/ciuic" alone/ciuic-tune model --topology dgx_a100 > alone.txt 2>&1 || { cat alone.txt; exit 1; }
  step "ciuic-tune export"
  "$prefix/bin/ciuic-tune" export --profile a100.profile.json --format nccl-tuner > env.sh
  grep -q "NCCL_TUNER_PLUGIN=.*$prefix" env.sh
  step "Python from the prefix site-packages"
  PYTHONPATH="$site" /usr/bin/python3 -c "
import ciuic, sys
p = ciuic.library_path()
if not p.startswith(sys.argv[1]):
    raise SystemExit(\"install_test: ciuic loaded \" + p + \", not the library under the prefix \" + sys.argv[1])
c = ciuic.Codec(\"int8\")
print(\"loaded\", p, c)
" "$prefix"
  step "Python from a venv (pip install --no-build-isolation), the prefix on PATH"
  PATH="$prefix/bin:$PATH" "$work/venv/bin/python" -c "
import ciuic, sys
p = ciuic.library_path()
if not p.startswith(sys.argv[1]):
    raise SystemExit(\"install_test: ciuic loaded \" + p + \", not the library under the prefix \" + sys.argv[1])
print(\"loaded\", p)
" "$prefix"
  step "every check passed"
' install_test "$src" "$work" "$prefix" "$site" "${#micro[@]}"
