#!/usr/bin/env bash
# KubePlay: `geodesic deploy render --target kubernetes --workload pods` of
# the default job's shape (2 regions, 2 shards, 4 workers, BSP) runs under
# `podman play kube` with every process in its own container, and trains
# exactly the job `geodesic launch` trains: the same test accuracy, to the
# last of the 10,000 test images, as `geodesic launch` of the same job and
# seed in the same image (BSP sums each round's gradients in worker order,
# so a job and seed give one model; the image's binary and libraries, not
# the host's, whose BLAS may round differently). One epoch of the MLP (about
# 0.85; the CNN's 3 epochs took 4-5 minutes here and came within 0.5 points,
# not exactly, of the host's launch), at least 0.82: the pods train. The
# CNN runs in containers in ComposeThreeRegions and KubeElastic.
source "$(dirname "$0")/lib.sh"
need_image
JOB=$SRC/examples/fashion_mnist.yaml
SETS=(--set model.name=mlp --set training.epochs=1)
DEADLINE_S=${KUBE_DEADLINE_S:-600}  # liveness, not speed: slow cores took 4-5x longer

t=$SECONDS
mkdir -p "$WORK/launch"
chown 10001:10001 "$WORK/launch"  # the image's user
podman run --rm --network none -v "$SRC/examples:/examples:ro" -v "$WORK/launch:/var/lib/geodesic/run" "$IMAGE" \
  launch "/examples/${JOB##*/}" --run-dir /var/lib/geodesic/run --quiet --no-dashboard --no-metrics "${SETS[@]}" \
  > "$WORK/launch.log" 2>&1 || fail "geodesic launch in the image: $(tail -5 "$WORK/launch.log")"
launch_acc=$(json_field "$WORK/launch/result.json" test_accuracy)
echo "geodesic launch in the image: $((SECONDS - t)) s"

"$GEODESIC" deploy render "$JOB" --target kubernetes --workload pods --image "$IMAGE" --pull-policy Never \
  "${SETS[@]}" --out "$WORK/k8s" > /dev/null
M=$WORK/k8s/kubernetes.yaml
PODS=$(pods_of "$M")
[[ -n $PODS ]] || fail "no pods in $M"
claim_pods $PODS
on_exit podman play kube --down "$M"

start=$SECONDS
podman play kube "$M" > "$WORK/play.log" 2>&1 || fail "podman play kube: $(tail -5 "$WORK/play.log")"
echo "podman play kube: $((SECONDS - start)) s"
containers=$(podman ps -a --filter "pod=coordinator" --format '{{.Names}}' | grep -vc infra || true)
wait_pods_exited "$start" "$DEADLINE_S" $PODS
elapsed=$((SECONDS - start))

count=$(wc -l < "$WORK/containers")
result=$(podman volume inspect data-worker-0-0 --format '{{.Mountpoint}}')/result.json
[[ -f $result ]] || { dump_logs; fail "the evaluator wrote no result"; }
kube_acc=$(json_field "$result" test_accuracy)
python3 - "$kube_acc" "$launch_acc" <<'PY' || { dump_logs; exit 1; }
import sys
kube, launch = map(float, sys.argv[1:])
if kube < 0.82:
    sys.exit(f"FAIL: test accuracy {kube:.4f} under podman play kube, below 0.82")
if kube != launch:
    sys.exit(f"FAIL: {kube:.4f} under podman play kube, {launch:.4f} under geodesic launch: BSP should give the same model")
PY
echo "PASS: $count containers (coordinator pod: $containers), ${elapsed} s from play to the last exit;" \
  "test accuracy $kube_acc under podman play kube and under geodesic launch"
