#!/usr/bin/env bash
# A multi-host cluster on one machine. Each host is a network namespace with its own UTS namespace
# (its own host name, labhost0 ... labhostN-1) and one interface, eth0, addressed 10.213.x.y/16 (host i at i+1)
# on a bridge that lives in a namespace of its own (the switch): nothing is added to the machine's
# own network. Every host's eth0 is shaped with tc netem (rate, delay, optional loss), so traffic
# between hosts crosses a slow link in both directions while ranks on one host share memory.
# Open MPI launches across the hosts through its normal remote path: a hostfile naming the hosts,
# and an rsh agent that enters the host's namespaces where ssh would log in. The lab is removed
# (processes, namespaces, files) when the command ends, fails or is interrupted.
#
#   scripts/cluster-lab.sh [--hosts 2] [--ranks-per-host 2] [--rate 1gbit] [--delay 1ms] [--loss 0]
#                          [--racks 1] [--spine-rate 200mbit] [--run] -- COMMAND [ARGS...]
#
#   (default)  COMMAND runs as an MPI job: mpiexec -n HOSTS*RANKS_PER_HOST, RANKS_PER_HOST per host.
#   --run      COMMAND runs once on labhost0 with the lab's Open MPI settings in its environment, so
#              an mpiexec it starts (ciuic-bench --ranks N, ciuic-tune --mode measure) spans the lab.
#   --torch    COMMAND runs once per rank, as under torchrun: RANK, WORLD_SIZE, LOCAL_RANK,
#              LOCAL_WORLD_SIZE, MASTER_ADDR (labhost0, 10.213.0.1) and MASTER_PORT (29400) set
#              (e.g. /usr/bin/python3 scripts/train_tta.py ...; gloo on eth0)
#   --rate R   line rate of each host's link (tc netem rate: 1gbit, 100mbit, ...; "none": unshaped)
#   --delay D  one-way delay added on each host's egress (1ms: 2 ms round trip; default 0: none)
#   --loss P   packet loss in percent on each host's egress (default 0: none)
#              Delay and loss need the kernel's netem qdisc: without it they are refused (exit 1)
#              and the rate is shaped with tbf.
#   --racks K  K racks of HOSTS/K hosts (consecutive host numbers): each rack's hosts on a bridge of
#              its own, the racks' bridges joined through a spine bridge by one uplink each
#   --spine-rate R  each rack uplink's rate, both directions (tbf; default 200mbit; "none": unshaped):
#              the oversubscribed spine of profiles/topologies/cluster_lab_racks.json
#
#   scripts/cluster-lab.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
#       build/bin/ciuic-bench allreduce --backend ciuic --algo hier --codec int8 --sizes 1M:64M
#
# Needs root (namespaces, tc, /etc/netns). Exit code: the command's (the lab's own failures: 1).
set -euo pipefail

hosts=2 rph=2 rate=1gbit delay=0 loss=0 run_plain=0 racks=1 spine_rate=200mbit torch=0
usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "cluster-lab: $1 needs a value" >&2; exit 1; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) need_value "$@"; hosts=$2; shift 2 ;;
    --ranks-per-host) need_value "$@"; rph=$2; shift 2 ;;
    --rate) need_value "$@"; rate=$2; shift 2 ;;
    --delay) need_value "$@"; delay=$2; shift 2 ;;
    --loss) need_value "$@"; loss=$2; shift 2 ;;
    --racks) need_value "$@"; racks=$2; shift 2 ;;
    --spine-rate) need_value "$@"; spine_rate=$2; shift 2 ;;
    --run) run_plain=1; shift ;;
    --torch) torch=1; shift ;;
    --) shift; break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cluster-lab: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
[ "$run_plain" -eq 1 ] && [ "$torch" -eq 1 ] && { echo "cluster-lab: --run and --torch exclude each other" >&2; exit 1; }
[ $# -gt 0 ] || { echo "cluster-lab: no command given (usage: cluster-lab.sh [options] -- COMMAND...)" >&2; exit 1; }
[[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 64 ] ||
  { echo "cluster-lab: --hosts '$hosts' is not a host count in 1..64" >&2; exit 1; }
[[ "$rph" =~ ^[0-9]+$ ]] && [ "$rph" -ge 1 ] && [ "$rph" -le 64 ] ||
  { echo "cluster-lab: --ranks-per-host '$rph' is not a rank count in 1..64" >&2; exit 1; }
[[ "$rate" == none || "$rate" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] ||
  { echo "cluster-lab: --rate '$rate' is not a tc rate (e.g. 1gbit, 100mbit) or none" >&2; exit 1; }
[[ "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)?$ ]] ||
  { echo "cluster-lab: --delay '$delay' is not a tc time (e.g. 1ms, 200us, 0)" >&2; exit 1; }
[[ "$loss" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v l="$loss" 'BEGIN { exit !(l < 100) }' ||
  { echo "cluster-lab: --loss '$loss' is not a percentage below 100" >&2; exit 1; }
[[ "$racks" =~ ^[0-9]+$ ]] && [ "$racks" -ge 1 ] && [ $((hosts % racks)) -eq 0 ] ||
  { echo "cluster-lab: --racks '$racks' does not divide the $hosts host(s) into racks" >&2; exit 1; }
[[ "$spine_rate" == none || "$spine_rate" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] ||
  { echo "cluster-lab: --spine-rate '$spine_rate' is not a tc rate (e.g. 200mbit) or none" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
  echo "cluster-lab: needs root (network and UTS namespaces, tc, /etc/netns); run it as root" >&2
  exit 1
fi
for tool in ip tc unshare mpiexec; do
  command -v "$tool" >/dev/null 2>&1 || { echo "cluster-lab: '$tool' is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

# Delay and loss need the kernel's netem qdisc (sch_netem); the rate alone needs only tbf.
if [ "$delay" != 0 ] || [ "$loss" != 0 ]; then
  probe="ciuic-lab-probe-$$"
  ip netns add "$probe"
  netem_ok=1
  ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms >/dev/null 2>&1 || netem_ok=0
  ip netns del "$probe"
  if [ "$netem_ok" -eq 0 ]; then
    echo "cluster-lab: --delay $delay / --loss $loss% need tc netem, which this kernel ($(uname -r)) lacks (CONFIG_NET_SCH_NETEM); use --delay 0 --loss 0 (the rate is shaped with tbf)" >&2
    exit 1
  fi
fi

id="ciuic-lab-$$"
sw="$id-sw"
labdir=$(mktemp -d "/tmp/$id.XXXXXX")
ns_of() { echo "$id-h$1"; }
# Ends every process left in the lab's namespaces, then removes the namespaces and their files.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local i ns pids tries
  local all=("$sw")
  for i in $(seq 0 $((hosts - 1))); do all+=("$(ns_of "$i")"); done
  # kill -9 is asynchronous: wait (up to 5 s) until no process is left in any of the namespaces.
  for tries in $(seq 50); do
    pids=""
    for ns in "${all[@]}"; do pids+=" $(ip netns pids "$ns" 2>/dev/null || true)"; done
    [ -z "${pids// /}" ] && break
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  for ns in "${all[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$labdir"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The switch: one bridge; each host's veth peer is a port of it.
ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
# Racks: a bridge each, joined to br0 (the spine) by a veth pair whose two ends are shaped, so traffic
# between racks crosses the rack's uplink at the spine rate in each direction.
port_bridge() { echo br0; }
if [ "$racks" -gt 1 ]; then
  for r in $(seq 0 $((racks - 1))); do
    ip -n "$sw" link add "rk$r" type bridge
    ip -n "$sw" link set "rk$r" up
    ip -n "$sw" link add "up$r" type veth peer name "dn$r"
    ip -n "$sw" link set "up$r" master "rk$r"
    ip -n "$sw" link set "dn$r" master br0
    ip -n "$sw" link set "up$r" up
    ip -n "$sw" link set "dn$r" up
    if [ "$spine_rate" != none ]; then
      for end in "up$r" "dn$r"; do
        ip netns exec "$sw" tc qdisc add dev "$end" root tbf rate "$spine_rate" burst 256kb latency 100ms
      done
    fi
  done
  port_bridge() { echo "rk$(($1 / (hosts / racks)))"; }
fi
hostfile="$labdir/hostfile"
hostsfile="$labdir/hosts"
printf '127.0.0.1\tlocalhost\n' >"$hostsfile"
: >"$hostfile"
for i in $(seq 0 $((hosts - 1))); do
  printf '10.213.%d.%d\tlabhost%d\n' $(((i + 1) / 256)) $(((i + 1) % 256)) "$i" >>"$hostsfile"
  echo "labhost$i slots=$rph" >>"$hostfile"
done
for i in $(seq 0 $((hosts - 1))); do
  ns=$(ns_of "$i")
  ip netns add "$ns"
  # ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts: every host resolves every other.
  mkdir -p "/etc/netns/$ns"
  cp "$hostsfile" "/etc/netns/$ns/hosts"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$sw"
  ip -n "$ns" addr add "10.213.$(((i + 1) / 256)).$(((i + 1) % 256))/16" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$sw" link set "p$i" master "$(port_bridge "$i")"
  ip -n "$sw" link set "p$i" up
  if [ "$delay" != 0 ] || [ "$loss" != 0 ]; then
    # netem: the rate, the delay and the loss in one qdisc.
    shape=(limit 100000)
    [ "$delay" != 0 ] && shape+=(delay "$delay")
    [ "$rate" != none ] && shape+=(rate "$rate")
    [ "$loss" != 0 ] && shape+=(loss "$loss%")
    ip netns exec "$ns" tc qdisc add dev eth0 root netem "${shape[@]}"
  elif [ "$rate" != none ]; then
    # A token bucket: the rate alone (tbf splits TSO/GSO super-packets larger than its burst).
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  fi
done

# The rsh agent Open MPI runs where it would run ssh: "rsh HOST WORDS..." runs WORDS through a shell on
# HOST (inside its network namespace, under its host name), as ssh would on a remote machine.
cat >"$labdir/rsh" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  labhost[0-9]*) ;;
  *) echo "cluster-lab rsh: \$host is not a lab host" >&2; exit 255 ;;
esac
exec ip netns exec "$id-h\${host#labhost}" unshare --uts /bin/sh -c 'hostname "\$0" && exec /bin/sh -c "\$1"' "\$host" "\$*"
EOF
chmod +x "$labdir/rsh"

# Open MPI across the lab: the hostfile for every mpiexec, the agent for remote starts, TCP on eth0
# between hosts and shared memory within one.
export OMPI_MCA_orte_default_hostfile="$hostfile"
export OMPI_MCA_plm_rsh_agent="$labdir/rsh"
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0
export OMPI_MCA_rmaps_base_oversubscribe=1
# The lab's hosts share this machine's cores: a rank waiting for a message yields its core instead of
# spinning on it (Open MPI cannot see that the slots of different "hosts" are the same cores).
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export GLOO_SOCKET_IFNAME=eth0
export CIUIC_LAB_HOSTS=$hosts CIUIC_LAB_RANKS_PER_HOST=$rph CIUIC_LAB_RACKS=$racks

shaping="rate $rate, delay $delay, loss $loss%"
[ "$rate" = none ] && [ "$delay" = 0 ] && [ "$loss" = 0 ] && shaping="unshaped"
if [ "$racks" -gt 1 ]; then
  echo "cluster-lab: $hosts host(s) labhost0..labhost$((hosts - 1)) x $rph rank(s), 10.213.0.0/16 in $racks racks of $((hosts / racks)) behind a spine (each rack's uplink $spine_rate); each host's link $shaping" >&2
else
  echo "cluster-lab: $hosts host(s) labhost0..labhost$((hosts - 1)) x $rph rank(s), 10.213.0.0/16 behind one switch; each link $shaping" >&2
fi

# The command runs in the background and the script waits for it, so that a signal to the script alone
# (kill, a CI timeout) ends the lab at once: the traps run, and the cleanup ends what the command left.
# Its standard input stays the script's.
if [ "$torch" -eq 1 ]; then
  # torchrun's variables from Open MPI's, per rank; the rendezvous on labhost0. Open MPI's own
  # variables are then removed, as a torchrun job has none: a rank that saw them would take itself
  # for an MPI rank (and the programs it starts would try to join the MPI job). A rank that fails is
  # reported to mpiexec 2 s later, which then ends the others at once: torchrun's agent sees a failed
  # worker at its next check (every 5 s up to torch 2.3, every 0.1 s from 2.4), so the others have
  # that long to say what they saw.
  ip netns exec "$(ns_of 0)" unshare --uts /bin/sh -c 'hostname labhost0 && exec "$@"' sh \
    mpiexec -n $((hosts * rph)) --map-by slot --bind-to none /bin/sh -c 'export RANK=$OMPI_COMM_WORLD_RANK \
      WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK \
      LOCAL_WORLD_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE MASTER_ADDR=10.213.0.1 MASTER_PORT=29400
      for v in $(env | sed -n "s/^\(OMPI_[A-Za-z0-9_]*\|PMIX_[A-Za-z0-9_]*\|OPAL_[A-Za-z0-9_]*\|ORTE_[A-Za-z0-9_]*\)=.*/\1/p"); do
        unset "$v"
      done
      "$@"
      rc=$?
      [ "$rc" -eq 0 ] || sleep 2
      exit "$rc"' sh "$@" <&0 &
elif [ "$run_plain" -eq 1 ]; then
  ip netns exec "$(ns_of 0)" unshare --uts /bin/sh -c 'hostname labhost0 && exec "$@"' sh "$@" <&0 &
else
  ip netns exec "$(ns_of 0)" unshare --uts /bin/sh -c 'hostname labhost0 && exec "$@"' sh \
    mpiexec -n $((hosts * rph)) --map-by slot --bind-to none "$@" <&0 &
fi
child=$!
set +e
wait "$child"
rc=$?
set -e
exit $rc
