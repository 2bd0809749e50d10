#!/usr/bin/env bash
# Runs a test program with Debian's default /etc/hosts, where localhost is
# ::1 as well as 127.0.0.1 and getaddrinfo lists ::1 first, in a mount
# namespace of its own (nothing changes outside it). A target named
# localhost that listens on 127.0.0.1 only must still be reached.
#
#   tests/wan/with_debian_hosts.sh PROGRAM [ARGS...]
#
# Exits 77 (ctest: skipped, saying why) without root or unshare.
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root for a mount namespace"; exit 77; }
command -v unshare >/dev/null || { echo "skipped: unshare is not installed"; exit 77; }
hosts=$(mktemp)
trap 'rm -f "$hosts"' EXIT
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$hosts"
unshare --mount --propagation private bash -c '
  mount --bind "$1" /etc/hosts
  shift
  first=$(getent ahosts localhost | head -1 | cut -d" " -f1)
  echo "localhost resolves to $first first"
  exec "$@"
' with_debian_hosts "$hosts" "$@"
