#!/usr/bin/env bash
# Prints the path of this machine's Debian apt sources, for mmdebstrap to
# make root filesystems from the same mirror (deploy/container/build-image.sh,
# scripts/bare-machine-check.sh). Debian 12 keeps them in deb822 form in
# /etc/apt/sources.list.d/debian.sources on new installs and cloud images,
# in /etc/apt/sources.list on upgraded ones, and other tools (mmdebstrap
# among them) name the file otherwise: the first file that has an entry wins,
# in that order, then any other sources.list.d/*.sources, then *.list.
set -euo pipefail
shopt -s nullglob
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
  /etc/apt/sources.list.d/*.list; do
  [[ -f $f ]] && grep -qE '^[[:space:]]*(Types:|deb[[:space:]])' "$f" && { echo "$f"; exit 0; }
done
echo "apt-sources: no apt sources with an entry in /etc/apt/sources.list or /etc/apt/sources.list.d/" >&2
exit 1
