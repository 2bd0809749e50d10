#!/bin/sh
# Prints, one per line, the Debian packages that own the shared libraries
# BINARY loads (ldd: the whole DT_NEEDED closure), following symbolic links
# (update-alternatives' libblas.so.3 resolves to the BLAS actually chosen).
# Runs in the image's build stage. Usage: runtime-packages.sh BINARY
set -eu
binary=$1
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
  while read -r lib; do
    real=$(readlink -f "$lib")
    owner=""
    for path in "$real" "/usr$real" "${real#/usr}"; do
      owner=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
    done
    [ -n "$owner" ] || { echo "runtime-packages: no package owns $lib ($real)" >&2; exit 1; }
    echo "$owner"
  done | sort -u
