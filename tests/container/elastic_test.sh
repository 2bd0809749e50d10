#!/usr/bin/env bash
# KubeElastic: an elastic job (examples/elastic.yaml) rendered with
# `geodesic deploy render --target kubernetes --workload pods` runs under
# `podman play kube`, every process in its own container, while its
# membership changes as Kubernetes would change it: worker 1's process is
# stopped (SIGTERM) and started again in its pod (the same name, id and
# volume), two pods of the ids kept for late workers are created (ids 2
# and 6, from kubernetes-late-workers.yaml: a scale-up), and worker 4 is
# stopped (SIGTERM: a scale-down). The job reaches 88%;
# the summary `geodesic deploy summarize` builds from the pods' volumes shows
# every data unit taken once by every chunk, no acknowledged update lost,
# and who was a member when.
source "$(dirname "$0")/lib.sh"
need_image
JOB=$SRC/examples/elastic.yaml
SETS=(--set membership.heartbeat_ms=200 --set membership.lease_ms=1500)
DEADLINE_S=${KUBE_DEADLINE_S:-600}

"$GEODESIC" deploy render "$JOB" --target kubernetes --workload pods --image "$IMAGE" --pull-policy Never \
  "${SETS[@]}" --out "$WORK/k8s" > /dev/null
M=$WORK/k8s/kubernetes.yaml
LATE=$WORK/k8s/kubernetes-late-workers.yaml
[[ -f $LATE ]] || fail "no $LATE rendered"
# One file per pod (the job's ConfigMap, the pod's claim, the pod), to play
# pods one at a time.
mkdir -p "$WORK/pods"
/usr/bin/python3 - "$M" "$LATE" "$WORK/pods" <<'PY'
import sys, yaml
docs = [d for f in sys.argv[1:3] for d in yaml.safe_load_all(open(f)) if d]
job = next(d for d in docs if d["kind"] == "ConfigMap")
claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PersistentVolumeClaim"}
for d in docs:
    if d["kind"] == "Pod":
        name = d["metadata"]["name"]
        with open(f"{sys.argv[3]}/{name}.yaml", "w") as f:
            yaml.safe_dump_all([job, claims["data-" + name], d], f, sort_keys=False)
PY
PODS=$(pods_of "$M")
ALL="$PODS $(pods_of "$LATE")"
claim_pods $ALL
for pod in $ALL; do on_exit podman pod rm -f -t 0 "$pod"; done

podman play kube "$M" > "$WORK/play.log" 2>&1 || fail "podman play kube: $(tail -5 "$WORK/play.log")"
start=$SECONDS
until podman logs coordinator-coordinator 2>&1 | grep -q "training starts"; do
  (( SECONDS - start < 180 )) || fail "training did not start within 180 s: $(podman logs coordinator-coordinator 2>&1 | tail -5)"
  sleep 0.5
done
# ...and until every worker has its chunks' first values and trains: the
# coordinator's rendezvous can come well before that (a shard's first name
# lookups in the pod network have taken 40 s), and a worker stopped before
# it trains is a different case (it leaves during start-up).
for pod in $PODS; do
  [[ $pod == worker-* ]] || continue
  until podman logs "$pod-worker" 2>&1 | grep -q "\] training [0-9]* "; do
    (( SECONDS - start < 240 )) || fail "$pod did not start training within 240 s: $(podman logs "$pod-worker" 2>&1 | tail -5)"
    sleep 0.5
  done
done
t0=$SECONDS
at() { while (( SECONDS - t0 < $1 )); do sleep 0.2; done; }
play() { podman play kube "$@" >> "$WORK/play.log" 2>&1 || fail "podman play kube $*: $(tail -5 "$WORK/play.log")"; }
at 4
# Worker 1: its process stopped (SIGTERM: it leaves) and started again in
# the same pod: a new process with the same name, id, address and volume.
# (Not `podman pod stop`: that takes the pod's network down with the
# SIGTERM, where Kubernetes keeps it until the containers have exited, so
# the worker could not say goodbye.)
podman stop -t 30 worker-us-east-0-worker > /dev/null
podman start worker-us-east-0-worker > /dev/null
at 6
play "$WORK/pods/worker-us-east-1.yaml"  # worker 2 joins
at 8
play "$WORK/pods/worker-eu-west-2.yaml"  # worker 6 joins
at 12
podman stop -t 30 worker-eu-west-0-worker > /dev/null  # worker 4: SIGTERM, it leaves

# The job is over when every pod has exited (each restarts only on failure).
wait_pods_exited "$t0" "$DEADLINE_S" $PODS worker-us-east-1 worker-eu-west-2
elapsed=$((SECONDS - t0))

# The pods' volumes as one run directory.
RUN=$WORK/run
mkdir -p "$RUN/stats"
for pod in $PODS worker-us-east-1 worker-eu-west-2; do
  vol=$(podman volume inspect "data-$pod" --format '{{.Mountpoint}}')
  [[ -d $vol/stats ]] && cp -a "$vol/stats/." "$RUN/stats/"
done
cp "$(podman volume inspect data-worker-0-0 --format '{{.Mountpoint}}')/result.json" "$RUN/" ||
  { dump_logs; fail "the evaluator wrote no result"; }
"$GEODESIC" deploy summarize "$JOB" "${SETS[@]}" --run-dir "$RUN" --summary-file "$WORK/summary.json" \
  > "$WORK/summarize.log" 2>&1 || { dump_logs; fail "geodesic deploy summarize: $(cat "$WORK/summarize.log")"; }
python3 - "$WORK/summary.json" <<'PY' || { dump_logs; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
e = s["elastic"]
units = e["units_total"]
problems = []
if s["test_accuracy"] is None or s["test_accuracy"] < 0.88:
    problems.append(f"test accuracy {s['test_accuracy']}, below 0.88")
if e["units_finished"] != units:
    problems.append(f"{e['units_finished']} of {units} units finished")
for name, shard in e["shards"].items():
    if shard["units_complete"] != units:
        problems.append(f"{name}: {shard['units_complete']} of {units} units taken by every chunk")
if s["updates_taken"] != units * 12:
    problems.append(f"{s['updates_taken']} chunk updates taken, not {units} units x 12 chunks")
acked, answered = s["pushes_acknowledged"], s["updates_taken"] + e["unit_duplicates"]
if not acked <= answered <= acked + s["push_accounting"]["in_flight_at_exit"]:
    problems.append(f"{acked} chunks acknowledged, {answered} taken or duplicate units")
events = {(m["worker"], m["what"]) for m in e["membership"]}
for want in [(1, "left"), (1, "rejoined"), (2, "joined"), (6, "joined"), (4, "left")]:
    if want not in events:
        problems.append(f"no {want} in the membership timeline")
if problems:
    sys.exit("FAIL: " + "; ".join(problems) + "\n" + json.dumps(e["membership"], indent=1))
print(f"test accuracy {s['test_accuracy']}, {units} units ({e['units_reissued']} handed out again, "
      f"{e['unit_duplicates']} duplicate unit pushes), {acked} chunks acknowledged, {s['updates_taken']} taken;",
      "timeline:", ", ".join(f"{m['worker']} {m['what']} at {m['at_s']:.1f} s" for m in e["membership"]))
PY
echo "PASS: KubeElastic, ${elapsed} s from the start of training to the last exit"
