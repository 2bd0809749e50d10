#!/usr/bin/env bash
# The two checks of the project's threads (docs/threading.md):
#
#   scripts/thread-check.sh --clang   the whole project (LibTorch workers and
#                                     tests included) built with clang and
#                                     -Wthread-safety -Werror=thread-safety
#                                     into build-clang: every member marked
#                                     GD_GUARDED_BY is touched only under its
#                                     Mutex, or the build fails
#   scripts/thread-check.sh --tsan    the whole project built with gcc under
#                                     ThreadSanitizer into build-tsan, and the
#                                     unit tests (ctest -L unit) run there; a
#                                     report fails its test (halt_on_error)
#
# Neither is part of scripts/test.sh: each is a build of its own (docs/
# threading.md has their times on 2 cores). Run both before changing what
# threads share. Extra arguments go to ctest (--tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --clang)
    command -v clang++ >/dev/null || { echo "thread-check: clang++ is not installed (scripts/setup.sh test)" >&2; exit 1; }
    # A quick compile: the analysis runs in the front end, at any -O.
    CC=clang CXX=clang++ GEODESIC_BUILD_DIR=build-clang scripts/build.sh -DGEODESIC_QUICK_COMPILE=ON
    echo "thread-check: the clang build with -Werror=thread-safety is clean"
    ;;
  --tsan)
    shift
    # LibTorch's OpenMP threads are not instrumented; one thread each keeps
    # them out of the picture (the unit tests use one anyway).
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
    GEODESIC_BUILD_DIR=build-tsan scripts/build.sh -DGEODESIC_TSAN=ON
    ctest --test-dir build-tsan -L unit -j2 --output-on-failure "$@"
    ;;
  *)
    echo "usage: scripts/thread-check.sh --clang | --tsan [ctest arguments]" >&2
    exit 2
    ;;
esac
