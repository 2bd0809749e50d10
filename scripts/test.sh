#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, checks formatting,
# and runs every test (unit, integration, slow training runs).
# For the fast tests alone: ctest --test-dir build -L fast
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/check-format.sh
ctest --test-dir "${GEODESIC_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
