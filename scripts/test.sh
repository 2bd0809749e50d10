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
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/check-format.sh
scripts/check-layers.sh --self-test
scripts/check-layers.sh
ctest --test-dir "${GEODESIC_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" scripts/fuzz.sh
