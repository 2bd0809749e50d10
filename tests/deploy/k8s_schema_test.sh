#!/usr/bin/env bash
# KubernetesManifestSchema: the rendered manifests (both workloads; the
# default job and the three-region job with backups; a secured job's
# manifests and its Secrets) pass the offline schema
# check of tests/deploy/k8s_schema.py, and the check itself refuses a
# manifest with a misspelt field, a string for a number and a missing
# required field. Usage: k8s_schema_test.sh SOURCE_DIR GEODESIC_BINARY
set -euo pipefail
SRC=$1 GEODESIC=$2
check() { /usr/bin/python3 "$SRC/tests/deploy/k8s_schema.py" "$@"; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
files=()
for job in fashion_mnist three_regions; do
  for workload in statefulsets pods; do
    out=$WORK/$job-$workload
    "$GEODESIC" deploy render "$SRC/examples/$job.yaml" --set replication.backups=1 --target kubernetes \
      --workload "$workload" --out "$out" > /dev/null
    files+=("$out/kubernetes.yaml")
  done
done
# A secured job: its Secrets, and the pods that read them.
"$GEODESIC" deploy render "$SRC/examples/three_regions.yaml" --set security.mode=curve --target kubernetes \
  --out "$WORK/secured" > /dev/null
files+=("$WORK/secured/kubernetes-secrets.yaml" "$WORK/secured/kubernetes.yaml")
set +e
check "${files[@]}"
rc=$?
set -e
[[ $rc -eq 77 ]] && exit 77
[[ $rc -eq 0 ]] || { echo "FAIL: the rendered manifests do not pass"; exit 1; }
# The check can fail: a misspelt field, a string replica count, a nameless container.
sed -e '0,/imagePullPolicy/s//imagePullPolicyy/' -e '0,/replicas: 1$/s//replicas: "1"/' \
  -e '0,/- name: "server"$/s//- image: "x"/' "${files[0]}" > "$WORK/bad.yaml"
if check "$WORK/bad.yaml" > "$WORK/bad.out"; then
  echo "FAIL: the check passed a broken manifest"
  exit 1
fi
for want in "imagePullPolicyy: V1Container has no such field" "is not of type int" "Invalid value for \`name\`"; do
  grep -qF "$want" "$WORK/bad.out" || { echo "FAIL: the check missed: $want"; cat "$WORK/bad.out"; exit 1; }
done
echo "PASS: ${#files[@]} manifests; a broken one refused with $(grep -c . "$WORK/bad.out") lines"
