#!/usr/bin/env bash
# The main job: installs what is missing (scripts/setup.sh demo: the toolchain,
# the libraries, the data; not the test tools), builds the `geodesic` binary
# alone (no tests), and trains the default job (examples/fashion_mnist.yaml:
# the reference CNN on Fashion-MNIST, 2 regions, 2 parameter-server shards,
# 4 workers) with live progress and a final test accuracy. The summary lands
# in runs/summary.json. Prints the time of each phase at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GEODESIC_BUILD_DIR:-build}
start=$SECONDS

scripts/setup.sh demo
packages_s=$((SECONDS - start))

# A first build leaves the tests unconfigured (they need scripts/setup.sh
# test) and compiles quickly (-O1, no debug info: GEODESIC_QUICK_COMPILE in
# CMakeLists.txt); scripts/test.sh configures the tests in the same build
# directory at -O2 with line tables, which recompiles what was built here.
# A build directory that exists is built as it is configured.
configure=()
[[ -f "$BUILD_DIR/build.ninja" ]] || configure=(-DGEODESIC_BUILD_TESTS=OFF -DGEODESIC_QUICK_COMPILE=ON)
scripts/build.sh --target geodesic "${configure[@]}"
build_s=$((SECONDS - start - packages_s))

rc=0
"$BUILD_DIR/cli/geodesic" launch examples/fashion_mnist.yaml --summary runs/summary.json "$@" || rc=$?
job_s=$((SECONDS - start - packages_s - build_s))
echo "demo: $((SECONDS - start)) s in all: packages $packages_s s, build $build_s s, the job $job_s s"
exit $rc
