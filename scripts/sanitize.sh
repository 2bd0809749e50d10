#!/usr/bin/env bash
# Builds everything (LibTorch included) with gcc under AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan (GEODESIC_SANITIZE=ON) and runs
# the fast-labelled tests there, including the integration tests that start
# real `geodesic` processes (which inherit the options below). Any report
# stops the process that made it (halt_on_error), so the test fails.
# LibTorch itself is not instrumented. No suppressions are needed: the
# runs so far (docs/wire.md) found no leak or report outside our code; if
# one appears in LibTorch, libgomp or protobuf, add a suppressions file
# with a comment per entry and point LSAN_OPTIONS/UBSAN_OPTIONS at it here.
# Not part of scripts/test.sh: the instrumented build alone is about as long
# as the plain one (docs/wire.md, "Fuzzing and sanitizers", has the measured
# times). Run it before merging changes to message handling, checkpoints or
# process lifecycle. Extra arguments go to ctest (e.g. -R BadInput); set
# GEODESIC_KEEP_TEST_DIRS=1 to keep the integration tests' run directories
# (each process's log) under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
GEODESIC_BUILD_DIR=$BUILD scripts/build.sh -DGEODESIC_SANITIZE=ON
ctest --test-dir "$BUILD" -L fast -j2 --output-on-failure "$@"
