# Shared by the container tests (tests/container/*_test.sh, ctest label
# slow-container). Sourced with the source and build directories as $1 and
# $2. A test that cannot run containers here exits 77, which ctest reports as
# skipped, after saying why. Every test removes what it created in an EXIT
# trap: pods, containers, volumes, networks (netavark removes a network's
# iptables chains with it) and the ip_forward setting as it found it.
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
GEODESIC=$BUILD/cli/geodesic
IMAGE=localhost/geodesic:test
source "$SRC/deploy/container/env.sh"

if ! why=$(geodesic_containers_usable); then
  echo "SKIP: containers cannot run here: $why"
  exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/geodesic-container-test.XXXXXX")
IP_FORWARD=$(cat /proc/sys/net/ipv4/ip_forward)

# netavark's iptables chains (TABLE:CHAIN), which it keeps after its last
# network is removed.
netavark_chains() {
  local t
  for t in filter nat mangle; do
    iptables -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" && $2 ~ /^NETAVARK/ { print t ":" $2 }'
  done
}
NETAVARK_BEFORE=$(netavark_chains)
# Removes the netavark chains this test added, and the rules that jump to them.
remove_new_netavark_chains() {
  local tc t c new=()
  for tc in $(netavark_chains); do grep -qxF "$tc" <<< "$NETAVARK_BEFORE" || new+=("$tc"); done
  for tc in "${new[@]}"; do iptables -t "${tc%%:*}" -F "${tc#*:}"; done
  for tc in "${new[@]}"; do
    t=${tc%%:*} c=${tc#*:}
    iptables -t "$t" -S | grep -E -- "-j $c( |\$)" | sed 's/^-A /-D /' |
      while read -r rule; do eval iptables -t "$t" "$rule"; done
  done
  for tc in "${new[@]}"; do iptables -t "${tc%%:*}" -X "${tc#*:}"; done
}
CLEANUPS=()
# on_exit COMMAND...: run COMMAND (as one string) when the test ends, last registered first.
on_exit() { CLEANUPS+=("$*"); }
run_cleanups() {
  local i
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${CLEANUPS[$i]}" >/dev/null 2>&1 || true; done
  remove_new_netavark_chains || echo "could not remove netavark's iptables chains: $(netavark_chains)" >&2
  echo "$IP_FORWARD" > /proc/sys/net/ipv4/ip_forward
  rm -rf "$WORK"
}
trap run_cleanups EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# need_image: the test image must have been built by image_test.sh (the fixture).
need_image() {
  podman image exists "$IMAGE" || fail "$IMAGE is missing: ContainerImage (tests/container/image_test.sh) builds it"
}

# json_field FILE KEY: a top-level number or string of a JSON file.
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# wait_pods_exited SINCE DEADLINE_S POD...: waits until every pod has exited
# (pods restart only on failure) or DEADLINE_S seconds after SINCE ($SECONDS
# then); lists the containers and exit codes in $WORK/containers, and
# fails, with every container's log tail, if a pod still ran or a container
# exited with an error.
wait_pods_exited() {
  local since=$1 deadline=$2 running=1 pod
  shift 2
  while (( SECONDS - since < deadline )); do
    # One podman call a poll: a call per pod took a core-second a poll.
    running=$(podman pod ps --format '{{.Name}} {{.Status}}' |
      awk -v pods="$*" 'BEGIN { split(pods, p, " "); for (i in p) want[p[i]] = 1; n = length(want) }
        $1 in want { n--; if ($2 != "Exited") bad++ } END { print bad + n }')
    [[ $running -eq 0 ]] && break
    sleep 1
  done
  podman ps -a --format '{{.Names}} {{.ExitCode}} {{.Status}}' | grep -v infra > "$WORK/containers"
  (( running == 0 )) || { dump_logs; fail "the pods still ran after ${deadline} s"; }
  awk '$2 != 0 { bad = 1 } END { exit bad }' "$WORK/containers" ||
    { dump_logs; fail "a container failed: $(cat "$WORK/containers")"; }
}

# dump_logs: the tail of every container's log listed in $WORK/containers.
dump_logs() {
  local c
  for c in $(awk '{print $1}' "$WORK/containers"); do echo "--- $c"; podman logs "$c" 2>&1 | tail -15; done
}

# pods_of FILE: the names of the Pods in a rendered manifest file.
pods_of() { awk '/^kind: "Pod"/ { pod = 1 } pod && /^  name:/ { gsub(/"/, "", $2); print $2; pod = 0 }' "$1"; }

# claim_pods POD...: fails if a pod or its data volume of that name exists
# (names are global in podman: a leftover of another run would be taken
# over), and removes at exit what playing them makes: each claim's volume,
# the job's ConfigMap volume and podman's kube network.
claim_pods() {
  local pod
  for pod in "$@"; do
    ! podman pod exists "$pod" || fail "a pod named $pod exists already (podman pod rm -f $pod)"
    ! podman volume exists "data-$pod" || fail "a volume data-$pod exists already (podman volume rm data-$pod)"
  done
  podman network exists podman-default-kube-network || on_exit podman network rm -f podman-default-kube-network
  on_exit podman volume rm -f geodesic-job
  for pod in "$@"; do on_exit podman volume rm -f "data-$pod"; done
}
