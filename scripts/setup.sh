#!/usr/bin/env bash
# Installs the Debian packages Geodesic needs to build, test and run.
# Idempotent: it asks dpkg first and says nothing when all are present.
# Needs root (or sudo) only when something is missing. Debian 12 (bookworm).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config clang-format
  # clang for the libFuzzer targets and the sanitizer build of the codecs
  clang libclang-rt-14-dev
  # libraries: sockets, wire format, models, compression, job files, JSON, flags,
  # IDX.gz data, tests, the link-emulating proxy
  libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libtorch-dev libzstd-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libgtest-dev libgmock-dev libasio-dev
  # SHA-256 of checkpoints, HMAC tokens
  libssl-dev
  # /metrics on every process (prometheus-cpp's model and text format); the tests check the
  # exposition with promtool and scrape a running job with a real Prometheus server
  prometheus-cpp-dev prometheus
  # the dashboard's browser test: headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # an optimized BLAS for LibTorch (Debian's links the reference libblas.so.3)
  libopenblas0-pthread
  # plots of benchmark results (bench/plot_*.py)
  python3-matplotlib
  # the data: Fashion-MNIST in /usr/share/datasets/fashion-mnist
  dataset-fashion-mnist
  # kernel WAN emulation (wan.emulation: netns, deploy/netns) and the PyTorch DDP baseline (bench/ddp_baseline.py)
  iproute2 iptables libnetfilter-queue-dev python3-torch
  # TorchScript models from Python (scripts/export_model.py: torchvision's ResNet-18) and the
  # check that a run's final parameters evaluate the same in PyTorch (scripts/evaluate_params.py)
  python3-torchvision python3-yaml
  # the OCI image and the container deployments (deploy/container, deploy render): a Debian root
  # filesystem from the apt mirror, buildah to build, podman (with runc: crun fails on cgroup v1
  # hybrid hosts) and podman-compose to run
  mmdebstrap buildah podman runc catatonit netavark aardvark-dns podman-compose uidmap
  # the offline schema check of the rendered Kubernetes manifests (its API models)
  python3-kubernetes
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
