#!/usr/bin/env bash
# ContainerCleanup (the fixture's cleanup): removes the test image and any
# build container a failed image build left. The build stage's base image
# stays: it is the cache deploy/container/build-image.sh reuses.
source "$(dirname "$0")/lib.sh"
podman image rm -f "$IMAGE" >/dev/null 2>&1 || true
buildah containers --format '{{.ContainerName}} {{.FromImage}}' 2>/dev/null |
  awk '$2 ~ /geodesic-build-base|^scratch$/ { print $1 }' | xargs -r buildah rm >/dev/null 2>&1 || true
podman image exists "$IMAGE" && fail "$IMAGE is still there"
echo "PASS: removed $IMAGE"
