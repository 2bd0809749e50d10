#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the default job
# (examples/fashion_mnist.yaml: the reference CNN on Fashion-MNIST, 2 regions,
# 2 parameter-server shards, 4 workers) with live progress and a final
# test accuracy. The summary lands in runs/summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/cli/geodesic launch examples/fashion_mnist.yaml --summary runs/summary.json "$@"
