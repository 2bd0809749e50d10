#!/usr/bin/env bash
# KubePlay: `geodesic deploy render --target kubernetes --workload pods` of
# the default job runs under `podman play kube` with every process in its own
# container, and reaches 88% test accuracy within 0.5 points of `geodesic
# launch` of the same job and seed on this machine.
source "$(dirname "$0")/lib.sh"
need_image
JOB=$SRC/examples/fashion_mnist.yaml
DEADLINE_S=${KUBE_DEADLINE_S:-600}  # liveness, not speed: slow cores took 4-5x longer

"$GEODESIC" launch "$JOB" --run-dir "$WORK/launch" --quiet --no-dashboard --no-metrics > "$WORK/launch.log" 2>&1 ||
  fail "geodesic launch: $(tail -5 "$WORK/launch.log")"
launch_acc=$(json_field "$WORK/launch/result.json" test_accuracy)

"$GEODESIC" deploy render "$JOB" --target kubernetes --workload pods --image "$IMAGE" --pull-policy Never \
  --out "$WORK/k8s" > /dev/null
M=$WORK/k8s/kubernetes.yaml
PODS=$(pods_of "$M")
[[ -n $PODS ]] || fail "no pods in $M"
claim_pods $PODS
on_exit podman play kube --down "$M"

start=$SECONDS
podman play kube "$M" > "$WORK/play.log" 2>&1 || fail "podman play kube: $(tail -5 "$WORK/play.log")"
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
if kube < 0.88:
    sys.exit(f"FAIL: test accuracy {kube:.4f} under podman play kube, below 0.88")
if abs(kube - launch) > 0.005:
    sys.exit(f"FAIL: {kube:.4f} under podman play kube, {launch:.4f} under geodesic launch: more than 0.5 points apart")
PY
echo "PASS: $count containers (coordinator pod: $containers), ${elapsed} s from play to the last exit;" \
  "test accuracy $kube_acc under podman play kube, $launch_acc under geodesic launch"
