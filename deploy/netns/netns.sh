#!/usr/bin/env bash
# Kernel-level WAN emulation on one machine (root): one network namespace per
# region, joined through a router namespace that shapes every ordered region
# pair's traffic. `geodesic launch` runs it for `wan.emulation: netns`
# (deploy/netns.h); it also works by hand. See docs/wan.md.
#
#   netns.sh up CONF|RUN_DIR   build the topology (RUN_DIR: uses RUN_DIR/netns.conf)
#   netns.sh down              remove everything it built (idempotent)
#   netns.sh cut A B           drop all traffic between regions A and B, both ways
#   netns.sh heal A B          undo a cut
#   netns.sh status            what is up, the delayer, the rules and counters
#   netns.sh counters          bytes forwarded per declared link direction: FROM TO BYTES
#
# CONF is a text file; '#' starts a comment:
#   region NAME                            one per region, in order; the i-th
#                                          (i = 1..) gets 10.77.i.0/24
#   link FROM TO DELAY_MS JITTER_MS MBIT LOSS
#                                          one direction: one-way delay, uniform
#                                          jitter in [0, JITTER_MS] (never
#                                          reordering), rate (0: unlimited),
#                                          loss fraction (0..1)
#   gso off                                optional: MTU-sized packets only
#                                          (per-packet loss, more CPU; default
#                                          on when any link has loss)
#
# Topology:
#   gd-<region>  veth gdv0 = 10.77.i.2/24, default route via 10.77.i.1
#   gd-router    veth gdr<i> = 10.77.i.1/24 toward region i, ip_forward on;
#                gdr0 = 10.77.0.2/24 toward the host (gd-host = 10.77.0.1/24,
#                host route 10.77.0.0/16 via 10.77.0.2; unshaped), so processes
#                outside the namespaces reach every region.
# Per ordered pair A->B, in gd-router:
#   rate   an HTB class on gdr<B> (egress toward B) for source 10.77.A.0/24,
#          with a FIFO of one bandwidth-delay product (at least 64 KiB)
#   loss   iptables FORWARD (chain GD-LINKS) -s A -d B -m statistic DROP
#   delay  iptables GD-LINKS -s A -d B -j NFQUEUE --queue-num 256*A+B, served
#          by geodesic-nfq-delay in gd-router (delaying in the sender's own
#          namespace would collapse TCP throughput)
#   cut    chain GD-CUTS (before GD-LINKS) -s A -d B -j DROP, both ways
#
# Environment: GD_NFQ_DELAY (the delayer binary; default: next to this
# script's build, then PATH), GD_NETNS_STATE (default /run/geodesic-netns:
# the conf, the delayer's pidfile and log), GD_NETNS_OWNER (the pid of the
# process that brings the topology up and will take it down: recorded with
# its start time, so that a later `up` takes down a topology whose owner
# died without doing so, a SIGKILLed launcher, instead of refusing to start).
set -euo pipefail
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin

STATE=${GD_NETNS_STATE:-/run/geodesic-netns}
ROUTER=gd-router
HOST_IF=gd-host
NET=10.77

die() { echo "netns.sh: $*" >&2; exit 1; }

need_tools() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, iptables and tc need CAP_NET_ADMIN); run as root or use wan.emulation: proxy"
  local t
  for t in ip tc iptables; do
    command -v "$t" >/dev/null || die "'$t' not found; apt-get install iproute2 iptables (scripts/setup.sh)"
  done
}

in_router() { ip netns exec "$ROUTER" "$@"; }

# Reads CONF into REGIONS (ordered), LINKS ("from to delay jitter mbit loss") and GSO.
REGIONS=()
LINKS=()
GSO=""
read_conf() {
  local conf=$1 kind a b c d e f extra lineno=0
  [[ -f $conf ]] || die "no such file: $conf"
  while read -r kind a b c d e f extra; do
    lineno=$((lineno + 1))
    [[ -z ${kind:-} || $kind == \#* ]] && continue
    case $kind in
      region)
        [[ $a =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$ ]] || die "$conf:$lineno: bad region name '$a'"
        REGIONS+=("$a")
        ;;
      link)
        [[ -n ${f:-} && -z ${extra:-} ]] || die "$conf:$lineno: expected 'link FROM TO DELAY_MS JITTER_MS MBIT LOSS'"
        local v
        for v in "$c" "$d" "$e" "$f"; do
          [[ $v =~ ^[0-9]+(\.[0-9]+)?([eE]-?[0-9]+)?$ ]] || die "$conf:$lineno: '$v' is not a non-negative number"
        done
        awk -v l="$f" 'BEGIN { exit !(l >= 0 && l <= 1) }' || die "$conf:$lineno: loss must be in [0, 1]"
        LINKS+=("$a $b $c $d $e $f")
        ;;
      gso) GSO=$a ;;
      *) die "$conf:$lineno: unknown line '$kind'" ;;
    esac
  done <"$conf"
  [[ ${#REGIONS[@]} -ge 1 ]] || die "$conf: no regions"
  [[ ${#REGIONS[@]} -le 250 ]] || die "$conf: at most 250 regions"
  local l from to
  for l in "${LINKS[@]}"; do
    read -r from to _ <<<"$l"
    index_of "$from" >/dev/null || die "$conf: link from unknown region '$from'"
    index_of "$to" >/dev/null || die "$conf: link to unknown region '$to'"
  done
}

index_of() {
  local i
  for i in "${!REGIONS[@]}"; do
    [[ ${REGIONS[$i]} == "$1" ]] && { echo $((i + 1)); return 0; }
  done
  return 1
}

find_delayer() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  local c
  for c in "${GD_NFQ_DELAY:-}" "$here/../../build/deploy/geodesic-nfq-delay" "$(command -v geodesic-nfq-delay || true)"; do
    [[ -n $c && -x $c ]] && { echo "$c"; return 0; }
  done
  return 1
}

# The start time of process $1 (field 22 of /proc/PID/stat), or failure if
# it does not exist.
start_time() {
  local s f
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  read -r -a f <<<"$s"
  echo "${f[19]}"
}

# Whether the topology that is up was left by an owner that no longer runs
# (its pid is gone or now names another process). Without a recorded owner
# it is not stale: someone may be using it.
stale_topology() {
  local pid start now
  [[ -f $STATE/owner ]] || return 1
  read -r pid start <"$STATE/owner" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  now=$(start_time "$pid") || return 0
  [[ $now != "$start" ]]
}

cmd_up() {
  local arg=${1:-}
  [[ -n $arg ]] || die "usage: netns.sh up CONF|RUN_DIR"
  [[ -d $arg ]] && arg=$arg/netns.conf
  need_tools
  read_conf "$arg"
  if ip netns list | grep -qw "^$ROUTER"; then
    if stale_topology; then
      echo "netns.sh: taking down a topology left by pid $(cut -d' ' -f1 "$STATE/owner"), which no longer runs"
      (cmd_down)
    else
      die "a topology is already up ($ROUTER exists; another job may be using it); run 'netns.sh down' first"
    fi
  fi
  if [[ -n $(ip -4 route show root $NET.0.0/16) ]]; then
    die "$NET.0.0/16 is already routed on this host: $(ip -4 route show root $NET.0.0/16 | head -1)"
  fi
  # Delay needs the delayer; check before building anything.
  local need_delay=0 any_loss=0 l
  for l in "${LINKS[@]}"; do
    read -r _ _ dly jit _ loss <<<"$l"
    awk -v d="$dly" -v j="$jit" 'BEGIN { exit !(d > 0 || j > 0) }' && need_delay=1
    awk -v p="$loss" 'BEGIN { exit !(p > 0) }' && any_loss=1
  done
  local delayer=""
  if [[ $need_delay -eq 1 ]]; then
    delayer=$(find_delayer) ||
      die "geodesic-nfq-delay not found (build it: apt-get install libnetfilter-queue-dev; ninja -C build geodesic-nfq-delay; or set GD_NFQ_DELAY)"
  fi
  [[ -z $GSO ]] && { [[ $any_loss -eq 1 ]] && GSO=off || GSO=on; }

  mkdir -p "$STATE"
  cp "$arg" "$STATE/conf"
  # Any failure from here on (a failed command under set -e, or die) undoes
  # what was built.
  trap 'if [[ $? -ne 0 ]]; then echo "netns.sh: up failed; cleaning up" >&2; cmd_down >/dev/null 2>&1 || true; fi' EXIT

  ip netns add "$ROUTER"
  ip -n "$ROUTER" link set lo up
  in_router sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
  # Host <-> router, unshaped.
  ip link add "$HOST_IF" type veth peer name gdr0 netns "$ROUTER"
  ip addr add $NET.0.1/24 dev "$HOST_IF"
  ip link set "$HOST_IF" up
  ip -n "$ROUTER" addr add $NET.0.2/24 dev gdr0
  ip -n "$ROUTER" link set gdr0 up
  ip route add $NET.0.0/16 via $NET.0.2 dev "$HOST_IF"

  local i name
  for i in "${!REGIONS[@]}"; do
    name=${REGIONS[$i]}
    local n=$((i + 1)) ns=gd-${REGIONS[$i]}
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # As on tuned WAN hosts: a connection idle for longer than its RTO keeps
    # its congestion window instead of starting slow again. Training traffic
    # comes in bursts (a push, a pull) separated by compute, so with the
    # default each burst over a long link would ramp up from 10 segments.
    # Applies to every process in the region (Geodesic's and DDP's alike).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
    ip -n "$ROUTER" link add "gdr$n" type veth peer name gdv0 netns "$ns"
    ip -n "$ROUTER" addr add "$NET.$n.1/24" dev "gdr$n"
    ip -n "$ns" addr add "$NET.$n.2/24" dev gdv0
    if [[ $GSO == off ]]; then
      ip -n "$ROUTER" link set "gdr$n" gso_max_segs 1
      ip -n "$ns" link set gdv0 gso_max_segs 1
    fi
    ip -n "$ROUTER" link set "gdr$n" up
    ip -n "$ns" link set gdv0 up
    ip -n "$ns" route add default via "$NET.$n.1"
    # Rate: HTB on the router's egress toward this region; unclassified
    # traffic (the host's, unshaped pairs) takes the fast default class.
    ip netns exec "$ROUTER" tc qdisc add dev "gdr$n" root handle 1: htb default 1
    ip netns exec "$ROUTER" tc class add dev "gdr$n" parent 1: classid 1:1 htb rate 40gbit quantum 60000
  done

  in_router iptables -N GD-CUTS
  in_router iptables -N GD-LINKS
  in_router iptables -A FORWARD -j GD-CUTS
  in_router iptables -A FORWARD -j GD-LINKS

  local queues=() from to dly jit mbit loss a b
  for l in "${LINKS[@]}"; do
    read -r from to dly jit mbit loss <<<"$l"
    [[ $from == "$to" ]] && continue  # inside a region: never crosses the router
    a=$(index_of "$from")
    b=$(index_of "$to")
    local src=$NET.$a.0/24 dst=$NET.$b.0/24
    if awk -v m="$mbit" 'BEGIN { exit !(m > 0) }'; then
      # The reverse direction's delay completes the round trip for the FIFO's size.
      local back_dly=$dly l2 f2 t2 d2
      for l2 in "${LINKS[@]}"; do
        read -r f2 t2 d2 _ <<<"$l2"
        [[ $f2 == "$to" && $t2 == "$from" ]] && back_dly=$d2
      done
      local classid minor limit burst
      minor=$(printf '%x' $((a + 16)))
      classid=1:$minor
      # FIFO: one bandwidth-delay product; burst: 2 ms at the rate, >= 16 KiB.
      limit=$(awk -v m="$mbit" -v d="$dly" -v r="$back_dly" 'BEGIN { b = m * 1e6 / 8 * (d + r) / 1000; if (b < 65536) b = 65536; printf "%d", b }')
      burst=$(awk -v m="$mbit" 'BEGIN { b = m * 1e6 / 8 * 0.002; if (b < 16384) b = 16384; printf "%d", b }')
      in_router tc class add dev "gdr$b" parent 1: classid "$classid" htb rate "${mbit}mbit" ceil "${mbit}mbit" \
        burst "$burst" cburst "$burst" quantum 60000
      in_router tc qdisc add dev "gdr$b" parent "$classid" handle "$minor:" bfifo limit "$limit"
      in_router tc filter add dev "gdr$b" parent 1: protocol ip prio 1 u32 match ip src "$src" flowid "$classid"
    fi
    if awk -v p="$loss" 'BEGIN { exit !(p > 0) }'; then
      in_router iptables -A GD-LINKS -s "$src" -d "$dst" -m statistic --mode random --probability "$loss" -j DROP
    fi
    # A rule without a target counts what got past the loss: `counters`.
    in_router iptables -A GD-LINKS -s "$src" -d "$dst"
    if awk -v d="$dly" -v j="$jit" 'BEGIN { exit !(d > 0 || j > 0) }'; then
      local q=$((256 * a + b))
      queues+=(--queue "$q:$dly:$jit")
    fi
  done

  if [[ ${#queues[@]} -gt 0 ]]; then
    rm -f "$STATE/delay.ready" "$STATE/delay.pid"
    # Its own session: a terminal's Ctrl-C must not kill it before `down`.
    # Raised priority: it stands in for a link, whose delay does not grow
    # when the machine's cores are busy with the job it carries.
    ip netns exec "$ROUTER" setsid nice -n -15 "$delayer" "${queues[@]}" --ready-file "$STATE/delay.ready" \
      </dev/null >"$STATE/delay.log" 2>&1 &
    local waited=0
    until [[ -s $STATE/delay.ready ]]; do
      sleep 0.05
      waited=$((waited + 1))
      if [[ $waited -gt 100 ]] || ! kill -0 $! 2>/dev/null; then
        [[ -s $STATE/delay.ready ]] && break
        die "the delayer did not start: $(tail -3 "$STATE/delay.log" 2>/dev/null)"
      fi
    done
    cp "$STATE/delay.ready" "$STATE/delay.pid"
    # Only now route packets to the queues (a queue with no listener drops).
    local k
    for ((k = 1; k < ${#queues[@]}; k += 2)); do
      local qnum=${queues[$k]%%:*}
      a=$((qnum / 256))
      b=$((qnum % 256))
      in_router iptables -A GD-LINKS -s "$NET.$a.0/24" -d "$NET.$b.0/24" -j NFQUEUE --queue-num "$qnum"
    done
  fi
  trap - EXIT
  local start
  if [[ ${GD_NETNS_OWNER:-} =~ ^[0-9]+$ ]] && start=$(start_time "$GD_NETNS_OWNER"); then
    echo "$GD_NETNS_OWNER $start" >"$STATE/owner"
  fi
  echo "netns.sh: up: ${#REGIONS[@]} region(s) (${REGIONS[*]}), ${#LINKS[@]} link direction(s), $((${#queues[@]} / 2)) delayed, gso $GSO"
}

cmd_down() {
  [[ $(id -u) -eq 0 ]] || die "needs root"
  local pid
  if [[ -f $STATE/delay.pid ]]; then
    pid=$(cat "$STATE/delay.pid")
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      local k
      for k in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  local names=() ns
  if [[ -f $STATE/conf ]]; then
    while read -r ns; do names+=("gd-$ns"); done < <(awk '$1 == "region" { print $2 }' "$STATE/conf")
  fi
  # Also any gd-* namespace left by a run whose state is gone.
  while read -r ns _; do
    [[ $ns == gd-* ]] && names+=("$ns")
  done < <(ip netns list 2>/dev/null)
  names+=("$ROUTER")
  for ns in $(printf '%s\n' "${names[@]}" | sort -u); do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$HOST_IF" 2>/dev/null || true  # gone with gd-router already, normally
  ip route del $NET.0.0/16 2>/dev/null || true
  rm -rf "$STATE"
  echo "netns.sh: down"
}

cut_rules() {
  local action=$1 a b
  [[ -f $STATE/conf ]] || die "no topology is up"
  read_conf "$STATE/conf"
  a=$(index_of "$2") || die "unknown region '$2' (regions: ${REGIONS[*]})"
  b=$(index_of "$3") || die "unknown region '$3' (regions: ${REGIONS[*]})"
  local s d
  for s in "$a $b" "$b $a"; do
    read -r x y <<<"$s"
    local rule=(-s "$NET.$x.0/24" -d "$NET.$y.0/24" -j DROP)
    if [[ $action == cut ]]; then
      in_router iptables -C GD-CUTS "${rule[@]}" 2>/dev/null || in_router iptables -A GD-CUTS "${rule[@]}"
    else
      while in_router iptables -C GD-CUTS "${rule[@]}" 2>/dev/null; do in_router iptables -D GD-CUTS "${rule[@]}"; done
    fi
  done
}

cmd_status() {
  if ! ip netns list | grep -qw "^$ROUTER"; then
    echo "netns.sh: down"
    return 0
  fi
  read_conf "$STATE/conf"
  local i
  for i in "${!REGIONS[@]}"; do echo "region ${REGIONS[$i]}: gd-${REGIONS[$i]} $NET.$((i + 1)).2"; done
  if [[ -f $STATE/delay.pid ]] && kill -0 "$(cat "$STATE/delay.pid")" 2>/dev/null; then
    echo "delayer: pid $(cat "$STATE/delay.pid")"
  else
    echo "delayer: not running"
  fi
  echo "-- iptables (gd-router)"
  in_router iptables -S GD-CUTS
  in_router iptables -L GD-LINKS -v -n
  if [[ -r /proc/net/netfilter/nfnetlink_queue ]]; then
    echo "-- nfqueue: queue portid waiting copy_mode copy_range queue_dropped user_dropped id_seq 1"
    in_router cat /proc/net/netfilter/nfnetlink_queue
  fi
  echo "-- tc classes (gd-router)"
  for i in "${!REGIONS[@]}"; do in_router tc -s class show dev "gdr$((i + 1))"; done
}

# One line per declared link direction: FROM TO BYTES (IP bytes forwarded
# since `up`, after loss, before the rate limit's queue).
cmd_counters() {
  ip netns list | grep -qw "^$ROUTER" || die "down"
  read_conf "$STATE/conf"
  local line re='^-A GD-LINKS -s ([0-9.]+)/24 -d ([0-9.]+)/24 -c ([0-9]+) ([0-9]+)$' a b
  while read -r line; do
    [[ $line =~ $re ]] || continue
    a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
    a=${a%.0} b=${b%.0}
    echo "${REGIONS[$((${a##*.} - 1))]} ${REGIONS[$((${b##*.} - 1))]} ${BASH_REMATCH[4]}"
  done < <(in_router iptables -S GD-LINKS -v)
}

case ${1:-} in
  up) cmd_up "${2:-}" ;;
  counters) cmd_counters ;;
  down) cmd_down ;;
  cut | heal)
    [[ $# -eq 3 ]] || die "usage: netns.sh $1 A B"
    need_tools
    cut_rules "$1" "$2" "$3"
    echo "netns.sh: $1 $2 <-> $3"
    ;;
  status) cmd_status ;;
  *) die "usage: netns.sh up CONF|RUN_DIR | down | cut A B | heal A B | status | counters" ;;
esac
