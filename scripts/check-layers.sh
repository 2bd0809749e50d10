#!/usr/bin/env bash
# Fails, naming file and include, when a folder includes a higher layer
# (the order is in scripts/check-layers.py). --self-test proves it fails on
# a bad include.
set -euo pipefail
exec python3 "$(dirname "$0")/check-layers.py" "$@"
