#!/usr/bin/env bash
# Builds Geodesic's OCI image with buildah. No registry is needed: both stages
# start from Debian 12 root filesystems that mmdebstrap makes from this
# machine's apt sources (the file scripts/apt-sources.sh names).
#
#   build stage    minbase + the compile dependencies; this checkout's files
#                  (tracked, and untracked but not ignored) are copied in and
#                  the `geodesic` binary is compiled (RelWithDebInfo, as
#                  scripts/build.sh does), then its debug sections stripped.
#   runtime stage  Debian's essential set (a shell, coreutils, dpkg) + exactly
#                  the packages that own the shared libraries the binary loads
#                  (ldd in the build stage, then dpkg -S) + dataset-fashion-mnist
#                  + the binary, run as the non-root user geodesic (10001).
#
# Usage: deploy/container/build-image.sh [--tag NAME] [--rebuild-base]
#   --tag NAME        image name (default: localhost/geodesic:latest, and also
#                     localhost/geodesic:<the checkout's commit, 12 digits>)
#   --rebuild-base    make both stages' bases again even if they are cached
#   --base-only       make (or find) the build stage's base and stop
# Both stages' bases are cached as images named by the hash of their package
# list and the apt sources: localhost/geodesic-build-base:<hash> (1.5 GB:
# the toolchain and LibTorch's headers) and localhost/geodesic-runtime-base:<hash>
# (Debian's essential set and the libraries). The compiler cache of the host
# (ccache -k cache_dir) is mounted into the build stage: after
# scripts/build.sh the compile is mostly cache hits; without it, a full build.
# Needs root. Prints each stage's time, the image's size and what dominates it.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
source "$SRC/deploy/container/env.sh"

TAG=localhost/geodesic:latest
REVISION_TAG=1
REBUILD_BASE=0
BASE_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) TAG="$2"; REVISION_TAG=0; shift 2 ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    --base-only) BASE_ONLY=1; shift ;;
    *) echo "build-image: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "build-image: needs root (podman and buildah run as root here)" >&2; exit 1; }

# What the build stage compiles with: scripts/setup.sh's toolchain and libraries,
# less the test, browser, plotting and emulation packages the binary does not use.
BUILD_PACKAGES=(build-essential cmake ninja-build ccache pkg-config git
  libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libtorch-dev libzstd-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libasio-dev libssl-dev
  prometheus-cpp-dev libnetfilter-queue-dev libopenblas0-pthread)
# Documentation, manual pages and translations are left out of both stages.
DPKG_OPTS=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*')

SOURCES=$("$(dirname "$0")/../../scripts/apt-sources.sh") || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/geodesic-image.XXXXXX")
BUILD_CTR=""
RUN_CTR=""
cleanup() {
  [[ -n $BUILD_CTR ]] && buildah rm "$BUILD_CTR" >/dev/null 2>&1 || true
  [[ -n $RUN_CTR ]] && buildah rm "$RUN_CTR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

stage_start=$SECONDS
stage_done() {
  printf 'build-image: %-44s %4d s\n' "$1" $((SECONDS - stage_start))
  stage_start=$SECONDS
}

# rootfs VARIANT PACKAGES OUT.tar [mmdebstrap options...]: a Debian 12 root filesystem.
rootfs() {
  local variant=$1 packages=$2 out=$3
  shift 3
  mmdebstrap --quiet --variant="$variant" --include="$packages" "${DPKG_OPTS[@]}" "$@" \
    bookworm "$out" "$SOURCES" || { echo "build-image: mmdebstrap failed ($variant)" >&2; exit 1; }
}

build_base() {
  local key
  key=$(printf '%s\n' "${BUILD_PACKAGES[@]}" | cat - "$SOURCES" | sha256sum | cut -c1-16)
  BASE=localhost/geodesic-build-base:$key
  if [[ $REBUILD_BASE -eq 0 ]] && podman image exists "$BASE"; then
    stage_done "build base (cached: $BASE)"
    return
  fi
  rootfs minbase "$(IFS=,; echo "${BUILD_PACKAGES[*]}")" "$WORK/build-base.tar"
  podman import --quiet "$WORK/build-base.tar" "$BASE" >/dev/null
  rm -f "$WORK/build-base.tar"
  stage_done "build base (mmdebstrap minbase)"
}

compile() {
  BUILD_CTR=$(buildah from --pull-never "$BASE")
  git -C "$SRC" ls-files -z --cached --others --exclude-standard |
    tar -C "$SRC" --null -T - -cf "$WORK/src.tar"
  buildah add --quiet "$BUILD_CTR" "$WORK/src.tar" /src >/dev/null
  local ccache_dir
  ccache_dir=$(ccache -k cache_dir 2>/dev/null || echo "$WORK/ccache")
  mkdir -p "$ccache_dir"
  # ccache hashes the locale variables (they change the compiler's messages):
  # the host's, so that its cache entries match.
  buildah run --volume "$ccache_dir:/ccache" "$BUILD_CTR" -- env -u LANG ${LANG:+LANG="$LANG"} \
    ${LC_ALL:+LC_ALL="$LC_ALL"} ${LC_CTYPE:+LC_CTYPE="$LC_CTYPE"} ${LC_MESSAGES:+LC_MESSAGES="$LC_MESSAGES"} sh -ec '
    export CCACHE_DIR=/ccache
    cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DGEODESIC_BUILD_TESTS=OFF >/dev/null
    cmake --build /src/build --target geodesic -j "$(nproc)" > /tmp/build.log 2>&1 ||
      { tail -40 /tmp/build.log; echo "build-image: the compile failed" >&2; exit 1; }
    tail -1 /tmp/build.log
    mkdir -p /out
    strip --strip-debug -o /out/geodesic /src/build/cli/geodesic
    sh /src/deploy/container/runtime-packages.sh /out/geodesic > /out/packages'
  stage_done "build stage (compile geodesic)"
}

# The runtime stage's base: essential + the packages, cached like the build
# base, by the hash of the package list and the apt sources.
runtime_base() {
  local packages=$1 key
  key=$(printf '%s\n' "$packages" | cat - "$SOURCES" | sha256sum | cut -c1-16)
  RUNTIME_BASE=localhost/geodesic-runtime-base:$key
  if [[ $REBUILD_BASE -eq 0 ]] && podman image exists "$RUNTIME_BASE"; then
    echo "build-image: runtime base cached: $RUNTIME_BASE"
    return
  fi
  rootfs essential "$packages" "$WORK/runtime.tar" \
    --customize-hook='echo "geodesic:x:10001:10001:Geodesic:/var/lib/geodesic:/usr/sbin/nologin" >> "$1/etc/passwd"' \
    --customize-hook='echo "geodesic:x:10001:" >> "$1/etc/group"' \
    --customize-hook='mkdir -p "$1/var/lib/geodesic" && chown 10001:10001 "$1/var/lib/geodesic"' \
    --customize-hook='rm -rf "$1/var/cache/apt" "$1/var/lib/apt/lists"'
  podman import --quiet "$WORK/runtime.tar" "$RUNTIME_BASE" >/dev/null
  rm -f "$WORK/runtime.tar"
}

runtime() {
  local build_root packages
  build_root=$(buildah mount "$BUILD_CTR")
  packages=$(tr '\n' ',' < "$build_root/out/packages")dataset-fashion-mnist
  echo "build-image: the binary loads libraries from $(tr -cd , <<< "$packages" | wc -c) packages (the list: dpkg -l in the image)"
  runtime_base "$packages"
  RUN_CTR=$(buildah from --pull-never "$RUNTIME_BASE")
  buildah copy --quiet --chown 0:0 --chmod 0755 "$RUN_CTR" "$build_root/out/geodesic" /usr/local/bin/geodesic >/dev/null
  buildah umount "$BUILD_CTR" >/dev/null
  stage_done "runtime stage (essential + libraries + binary)"
}

commit() {
  local revision
  revision=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
  buildah config --user 10001:10001 --workingdir /var/lib/geodesic \
    --entrypoint '["/usr/local/bin/geodesic"]' --cmd '["--help"]' \
    --env GEODESIC_DATA=/usr/share/datasets/fashion-mnist \
    --label org.opencontainers.image.title=geodesic \
    --label org.opencontainers.image.revision="$revision" \
    --label org.opencontainers.image.base.name=debian:bookworm-mmdebstrap-essential \
    "$RUN_CTR"
  local previous
  previous=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
  buildah commit --quiet --rm "$RUN_CTR" "$TAG" >/dev/null
  RUN_CTR=""

  [[ $REVISION_TAG -eq 0 ]] || podman tag "$TAG" "localhost/geodesic:${revision:0:12}"
  # The image this one replaced, if nothing names it now.
  if [[ -n $previous ]] && [[ -z $(podman image inspect --format '{{.RepoTags}}' "$previous" | tr -d '[]') ]]; then
    podman image rm "$previous" >/dev/null 2>&1 || true
  fi
  stage_done "commit $TAG"
}

report() {
  local size mnt
  size=$(podman image inspect --format '{{.Size}}' "$TAG")
  echo "build-image: $TAG is $((size / 1000000)) MB; the largest parts:"
  mnt=$(podman image mount "$TAG")
  (cd "$mnt" && du -xsm usr/lib/x86_64-linux-gnu/* usr/local/bin/geodesic usr/share/* 2>/dev/null |
    sort -rn | awk 'NR <= 8 { print "  MB " $0 }')  # awk reads it all: no SIGPIPE under pipefail
  podman image unmount "$TAG" >/dev/null
}

total_start=$SECONDS
build_base
[[ $BASE_ONLY -eq 1 ]] && exit 0
compile
runtime
commit
report
echo "build-image: done in $((SECONDS - total_start)) s"
