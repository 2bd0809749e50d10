# Sourced by Geodesic's container scripts and tests: podman and buildah read
# deploy/container/containers.conf unless the caller set CONTAINERS_CONF.
# geodesic_containers_usable says (exit status) whether podman can run a
# container here, printing why not.
GEODESIC_CONTAINER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$GEODESIC_CONTAINER_DIR/containers.conf}"

geodesic_containers_usable() {
  local tool
  for tool in podman buildah mmdebstrap runc; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed (scripts/setup.sh installs it)"; return 1; }
  done
  [[ $(id -u) -eq 0 ]] || { echo "containers here run as root (rootless podman is not set up)"; return 1; }
  podman info >/dev/null 2>&1 || { echo "podman cannot start: $(podman info 2>&1 | tail -1)"; return 1; }
}
