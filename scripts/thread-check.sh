#!/usr/bin/env bash
# The two checks of the project's threads (docs/threading.md):
#
#   scripts/thread-check.sh --clang   every translation unit of the project
#                                     (tests included) but the six that
#                                     include LibTorch's API, compiled by clang
#                                     with -Werror=thread-safety into
#                                     build-clang: every member marked
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
    # A quick compile: the analysis runs in the front end, at any -O. Every
    # unit but the few that include LibTorch's API, which clang cannot
    # compile against libstdc++ 12 in C++20 (scripts/clang-objects.py says
    # which it leaves out, and why).
    cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DGEODESIC_QUICK_COMPILE=ON -DGEODESIC_TESTS_WAIT_FOR_BINARY=OFF >/dev/null
    mapfile -t objects < <(python3 scripts/clang-objects.py build-clang)
    [[ ${#objects[@]} -gt 0 ]] || { echo "thread-check: no objects to build" >&2; exit 1; }
    ninja -C build-clang -j "$(nproc)" "${objects[@]}"
    echo "thread-check: ${#objects[@]} units compiled by clang with -Werror=thread-safety, clean"
    ;;
  --tsan)
    shift
    # LibTorch's OpenMP threads are not instrumented; one thread each keeps
    # them out of the picture (the unit tests use one anyway).
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    # libzmq is not instrumented: scripts/tsan.supp says what that leaves out.
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
    GEODESIC_BUILD_DIR=build-tsan scripts/build.sh -DGEODESIC_TSAN=ON
    ctest --test-dir build-tsan -L unit -j2 --output-on-failure "$@"
    ;;
  *)
    echo "usage: scripts/thread-check.sh --clang | --tsan [ctest arguments]" >&2
    exit 2
    ;;
esac
