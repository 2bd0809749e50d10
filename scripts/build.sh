#!/usr/bin/env bash
# Configures (once) and builds Geodesic into build/ with Ninja and ccache.
#
#   scripts/build.sh [--target NAME]... [CMAKE_ARGS...]
#
# --target NAME builds that target alone (repeatable; e.g. geodesic, as
# scripts/demo.sh does); without it, everything. Other arguments go to
# CMake's configure step, e.g. -DGEODESIC_SANITIZE=ON, and configure again.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GEODESIC_BUILD_DIR:-build}
targets=()
configure=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target)
      [[ $# -ge 2 && -n "$2" ]] || { echo "build: --target needs a target name (e.g. geodesic)" >&2; exit 2; }
      targets+=(--target "$2")
      shift 2
      ;;
    *) configure+=("$1"); shift ;;
  esac
done
if [[ ! -f "$BUILD_DIR/build.ninja" || ${#configure[@]} -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${configure[@]}" >/dev/null
fi
# LibTorch translation units need about 1.5 GB each; one job per core.
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
