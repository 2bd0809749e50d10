#!/usr/bin/env bash
# What a new user meets, measured: a bare Debian 12 machine, a fresh clone,
# scripts/demo.sh, then scripts/test.sh in the same clone.
#
#   scripts/bare-machine-check.sh [--demo-only] [--keep] [--rev REV] [--logs DIR]
#
# The machine is a chroot: a Debian 12 minbase root filesystem with git and
# ca-certificates (what a user needs to clone), made by mmdebstrap from this
# machine's apt sources (nothing else is downloaded), with an empty compiler
# cache. The clone is of this checkout's REV (default HEAD: commit what you
# want measured). Every command runs in mount and PID namespaces of its own
# (/proc, /sys and /dev, a fresh /dev/shm and the root itself mounted there
# only), so nothing it starts outlives it and nothing it mounts shows outside.
#
# Every command runs on this machine's network, as on a new machine: apt
# needs the mirror, and so does the container tests' image build (its root
# filesystems come from the same mirror); the jobs themselves use loopback.
# For scripts/test.sh the test set is installed first (scripts/setup.sh
# test). The kernel WAN emulation and container tests make their network
# namespaces, interfaces and firewall rules as they do on any machine, and
# remove them, even on failure.
#
# Prints the load (uptime) before and after each command and each phase's
# time; each command's whole output goes to DIR (default
# runs/bare-machine-<date>). Removes the root filesystem at the end, even on
# failure (--keep leaves it and prints its path). Needs root, mmdebstrap,
# unshare and ip; about 12 GB free in TMPDIR (default /var/tmp).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)

DEMO_ONLY=0
KEEP=0
REV=HEAD
LOGS=$SRC/runs/bare-machine-$(date +%Y%m%d-%H%M%S)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --demo-only) DEMO_ONLY=1; shift ;;
    --keep) KEEP=1; shift ;;
    --rev) [[ $# -ge 2 ]] || { echo "bare-machine-check: --rev needs a revision" >&2; exit 2; }
      REV=$2; shift 2 ;;
    --logs) [[ $# -ge 2 ]] || { echo "bare-machine-check: --logs needs a directory" >&2; exit 2; }
      LOGS=$2; shift 2 ;;
    *) echo "bare-machine-check: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "bare-machine-check: needs root (mmdebstrap, chroot, namespaces)" >&2; exit 1; }
for tool in mmdebstrap unshare chroot ip git; do
  command -v "$tool" >/dev/null || { echo "bare-machine-check: $tool is not installed" >&2; exit 1; }
done
COMMIT=$(git -C "$SRC" rev-parse --verify "$REV^{commit}") ||
  { echo "bare-machine-check: no commit '$REV' in $SRC" >&2; exit 2; }
SOURCES=$("$SRC/scripts/apt-sources.sh") || exit 1
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/geodesic-bare.XXXXXX")
ROOT=$WORK/root
cleanup() {
  local rc=$?
  if [[ $KEEP -eq 1 ]]; then
    echo "bare-machine-check: the machine is kept at $ROOT (rm -rf --one-file-system $WORK)"
  elif findmnt -rn -o TARGET | grep -q "^$WORK"; then
    # Nothing is mounted there outside the namespaces; never delete through a mount.
    echo "bare-machine-check: something is mounted under $WORK; not removing it" >&2
  else
    rm -rf --one-file-system "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load() { echo "bare-machine-check: load $(uptime | sed 's/.*load average: //') ($1)"; }

# in_machine NET LOG CMD...: CMD in the chroot as root, in a login-like
# environment, its output in $LOGS/LOG and on the terminal; NET is host-net
# or own-net (a network namespace with loopback alone).
in_machine() {
  local net=$1 log=$2 unshare_net=()
  shift 2
  [[ $net == own-net ]] && unshare_net=(--net)
  unshare --mount --pid --fork --kill-child "${unshare_net[@]}" bash -c '
    set -e
    root=$1 net=$2
    shift 2
    [[ $net != own-net ]] || ip link set lo up
    # The root a mount point, as on a machine (ip netns needs to make it a
    # slave); /sys with its cgroup mounts (podman, runc).
    mount --rbind "$root" "$root"
    mount --rbind /dev "$root/dev"
    mount --make-rslave "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --make-rslave "$root/sys"
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' in_machine "$ROOT" "$net" "$@" 2>&1 | tee "$LOGS/$log"
  return "${PIPESTATUS[0]}"
}

# timed NAME NET LOG CMD...: in_machine NET LOG CMD..., with the load before
# and after and the time it took (also appended to $LOGS/times).
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  load "before $name"
  in_machine "$@" || rc=$?
  load "after $name"
  echo "bare-machine-check: $name took $((SECONDS - start)) s (exit status $rc)" | tee -a "$LOGS/times"
  return $rc
}

echo "bare-machine-check: commit $COMMIT, logs in $LOGS, $(nproc) cores"
start=$SECONDS
mmdebstrap --quiet --variant=minbase --include=git,ca-certificates bookworm "$ROOT" "$SOURCES" ||
  { echo "bare-machine-check: mmdebstrap failed" >&2; exit 1; }
# What an installed system has and minbase leaves out.
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"
git clone --quiet --no-hardlinks "$SRC" "$ROOT/root/geodesic"
git -C "$ROOT/root/geodesic" checkout --quiet --detach "$COMMIT"
echo "bare-machine-check: the machine and the clone took $((SECONDS - start)) s (not part of what is measured)"

timed "scripts/demo.sh" host-net demo.log bash -c 'cd /root/geodesic && scripts/demo.sh'
grep -q 'finished: test accuracy' "$LOGS/demo.log" ||
  { echo "bare-machine-check: the demo printed no final accuracy" >&2; exit 1; }
[[ $DEMO_ONLY -eq 1 ]] && exit 0

timed "scripts/setup.sh test" host-net setup-test.log bash -c 'cd /root/geodesic && scripts/setup.sh test'
timed "scripts/test.sh" host-net test.log bash -c 'cd /root/geodesic && scripts/test.sh'
echo "bare-machine-check: skipped tests (ctest):"
grep -E '\*\*\*Skipped|SKIP' "$LOGS/test.log" | sed 's/^/  /' | sort -u | head -40 || true
