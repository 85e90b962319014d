#!/usr/bin/env bash
# A rate-limited link on one machine: creates a network namespace, shapes its loopback with a token
# bucket (tc tbf) to RATE, runs COMMAND inside it with Open MPI forced onto TCP over that loopback,
# and removes the namespace afterwards (also when the command fails or is interrupted).
#
#   scripts/netlab.sh [--rate 2gbit] [--latency 50ms] [--burst 256kb] -- COMMAND [ARGS...]
#   scripts/netlab.sh --rate 2gbit -- build/bin/ciuic-bench allreduce --backend ciuic --codec int8 --sizes 64M --ranks 2
#
# Needs root (namespaces, tc). Benchmarks use it; unit tests do not.
set -euo pipefail

rate=2gbit latency=50ms burst=256kb
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --latency) latency=${2:?--latency needs a value}; shift 2 ;;
    --burst) burst=${2:?--burst needs a value}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "netlab: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
if [ $# -eq 0 ]; then echo "netlab: no command given (usage: netlab.sh [--rate R] -- COMMAND...)" >&2; exit 1; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "netlab: needs root to create a network namespace and shape it with tc; run it as root" >&2
  exit 1
fi
for tool in ip tc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "netlab: '$tool' is missing (scripts/setup.sh installs iproute2)" >&2; exit 1; }
done

ns="ciuic-netlab-$$"
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst "$burst" latency "$latency"
echo "netlab: namespace $ns, loopback shaped to $rate (tbf burst $burst latency $latency); Open MPI over TCP" >&2

# Open MPI skips loopback by default: force TCP over lo for both the data and the runtime's wire-up.
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
set +e
ip netns exec "$ns" "$@"
rc=$?
set -e
exit $rc
