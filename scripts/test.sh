#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, checks formatting,
# runs every test (unit, integration, slow training runs), then the codecs
# under AddressSanitizer/UBSan and each decoder's libFuzzer target for a
# bounded time (scripts/fuzz.sh; FUZZ_SECONDS per target, 10 here: the
# depth comes from the long runs outside CI that docs/wire.md reports).
# For the fast tests alone: ctest --test-dir build -L fast (unit tests alone,
# components in-process: -L unit; integration tests: -L integration)
# The full build under ASan/UBSan (scripts/sanitize.sh) is not run here: it
# adds about 20 minutes on 2 cores (docs/wire.md, "Fuzzing and sanitizers").
# Installs scripts/setup.sh's test set (the demo's and the test tools) and
# builds every target, the tests included, into the build directory
# scripts/demo.sh may have started. Prints each phase's time as it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase_start=$SECONDS
phase_done() {
  echo "test: $1 took $((SECONDS - phase_start)) s ($((SECONDS - start)) s in all)"
  phase_start=$SECONDS
}
scripts/setup.sh test
phase_done packages
scripts/build.sh -DGEODESIC_BUILD_TESTS=ON -DGEODESIC_QUICK_COMPILE=OFF
phase_done build
scripts/check-format.sh
scripts/check-layers.sh --self-test
scripts/check-layers.sh
ctest --test-dir "${GEODESIC_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
phase_done "format, layers and ctest"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" scripts/fuzz.sh
phase_done "sanitizer and fuzz build and runs"
