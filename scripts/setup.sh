#!/usr/bin/env bash
# Installs the Debian packages Geodesic needs. Debian 12 (bookworm).
#
#   scripts/setup.sh demo   what building and running `geodesic` need: the
#                           toolchain, the libraries it compiles against,
#                           OpenBLAS and the Fashion-MNIST data (scripts/demo.sh)
#   scripts/setup.sh lm     the above, and what the language-model examples
#                           need (scripts/prepare_lm.sh): Debian's fortunes
#                           (the text) and python3-torch (the GPT's export)
#   scripts/setup.sh test   the above, and what the tests, the fuzz and
#                           sanitizer builds, the containers, the browser test,
#                           the kernel WAN emulation and the Python tools need
#                           (scripts/test.sh; also what no argument means)
#
# Idempotent: it asks dpkg first and says nothing when all are present.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

DEMO_PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config
  # libraries: sockets, wire format, models, compression, job files, JSON, flags,
  # IDX.gz data, the link-emulating proxy
  libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libtorch-dev libzstd-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libasio-dev
  # SHA-256 of checkpoints, HMAC tokens
  libssl-dev
  # /metrics on every process (prometheus-cpp's model and text format)
  prometheus-cpp-dev
  # an optimized BLAS for LibTorch (Debian's links the reference libblas.so.3)
  libopenblas0-pthread
  # the data: Fashion-MNIST in /usr/share/datasets/fashion-mnist
  dataset-fashion-mnist
)

LM_PACKAGES=(
  # natural-language text: 14,396 fortunes (2.4 MB) in 40 files, the documents and
  # groups of the language-model examples (scripts/prepare_lm.sh), and PyTorch to
  # export the GPT (scripts/export_model.py gpt) and convert the text (NumPy)
  fortunes python3-torch python3-numpy
)

TEST_PACKAGES=(
  # formatting check; clang for the libFuzzer targets and the sanitizer build of the codecs
  clang-format clang libclang-rt-14-dev
  # the unit and integration tests
  libgtest-dev libgmock-dev
  # the tests check the /metrics exposition with promtool and scrape a running job
  # with a real Prometheus server
  prometheus
  # the dashboard's browser test: headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # plots of benchmark results (bench/plot_*.py)
  python3-matplotlib
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

case "${1:-test}" in
  demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
  lm) PACKAGES=("${DEMO_PACKAGES[@]}" "${LM_PACKAGES[@]}") ;;
  test) PACKAGES=("${DEMO_PACKAGES[@]}" "${LM_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "setup: unknown set '$1' (use: scripts/setup.sh demo|lm|test)" >&2; exit 2 ;;
esac

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
t0=$SECONDS
$SUDO apt-get update -qq
# dpkg syncs every file it unpacks to disk; on a bare machine that is most
# of the install (the demo's set is 400 packages, 42,000 files: LibTorch's
# headers alone are 8,000). When nothing installed is upgraded, only new
# files are written, and a crash midway is mended by installing again, so
# the syncs are skipped then (docs/benchmarks.md, "The first five minutes").
plan=$($SUDO apt-get install -s --no-install-recommends "${missing[@]}")
dpkg_io=()
grep -q '^Inst [^ ]* \[' <<<"$plan" || dpkg_io=(-o Dpkg::Options::=--force-unsafe-io)
t1=$SECONDS
$SUDO apt-get install -y -qq --no-install-recommends "${dpkg_io[@]}" "${missing[@]}" >/dev/null
echo "setup: done: package lists in $((t1 - t0)) s, $(grep -c '^Inst ' <<<"$plan") packages downloaded and installed in $((SECONDS - t1)) s"
