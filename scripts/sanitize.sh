#!/usr/bin/env bash
# Builds everything (LibTorch included) with gcc under AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan (GEODESIC_SANITIZE=ON) and runs
# the fast-labelled tests there, including the integration tests that start
# real `geodesic` processes (which inherit the options below). Any report
# stops the process that made it (halt_on_error), so the test fails.
# LibTorch itself is not instrumented. No suppressions are checked in yet:
# the first full run has still to be made (see docs/wire.md); if LibTorch's
# load-time registries show up as leaks, add a suppressions file with a
# comment per entry and point LSAN_OPTIONS at it here.
# Not part of scripts/test.sh: see docs/wire.md ("Fuzzing and sanitizers")
# for its measured cost. Extra arguments go to ctest (e.g. -R BadInput).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
GEODESIC_BUILD_DIR=$BUILD scripts/build.sh -DGEODESIC_SANITIZE=ON
ctest --test-dir "$BUILD" -L fast -j2 --output-on-failure "$@"
