#!/usr/bin/env bash
# Configures (once) and builds Geodesic into build/ with Ninja and ccache.
# Extra arguments go to CMake's configure step, e.g. -DGEODESIC_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GEODESIC_BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" || $# -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
# LibTorch translation units need about 1.5 GB each; one job per core.
cmake --build "$BUILD_DIR" -j "$(nproc)"
