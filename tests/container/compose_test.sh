#!/usr/bin/env bash
# ComposeThreeRegions: `geodesic deploy render --target compose` of
# examples/three_regions.yaml runs under podman-compose, every process in its
# own container on its region's network and the link router (service wan) the
# only way between regions. The job reaches 88% test accuracy; the summary
# that `geodesic deploy summarize` builds from the shared run volume carries
# the bytes the router counted on every declared link direction, and no
# acknowledged update is lost.
source "$(dirname "$0")/lib.sh"
need_image
command -v podman-compose > /dev/null || { echo "SKIP: podman-compose is not installed (scripts/setup.sh)"; exit 77; }
JOB=$SRC/examples/three_regions.yaml
DEADLINE_S=${COMPOSE_DEADLINE_S:-600}
PROJECT=geodesic-compose-test
LABEL=io.podman.compose.project=$PROJECT

# Trained as docs/wan.md advises over such links (and as the hosts test,
# NetnsHostsTest, does): local SGD rounds of 6 steps, overlapped, int8 both
# ways, 5 epochs; BSP's 2,500 cross-region round trips took over 6 minutes
# here. Snapshots every 15 s: the evaluator scores each (7 s) after training.
"$GEODESIC" deploy render "$JOB" --target compose --image "$IMAGE" --set training.local_steps=6 \
  --set training.overlap_rounds=true --set compression.push=int8 --set compression.pull=int8 \
  --set training.epochs=5 --set eval.snapshot_every_s=15 --out "$WORK/compose" > /dev/null
# summarize reads the job the processes read.
JOB=$WORK/compose/job.yaml
# Names are global in podman: a leftover of another run would be taken over.
[[ -z $(podman ps -aq --filter "label=$LABEL") ]] || fail "containers of $PROJECT exist already"
[[ -z $(podman volume ls -q --filter "label=$LABEL") ]] || fail "volumes of $PROJECT exist already"
on_exit "podman network ls -q --filter label=$LABEL | xargs -r podman network rm -f"
on_exit "podman volume ls -q --filter label=$LABEL | xargs -r podman volume rm -f"
on_exit "podman ps -aq --filter label=$LABEL | xargs -r podman rm -f -t 2"

# podman-compose 1.0.3 makes plain bridges, between which the host routes:
# made here first with netavark's isolate option (podman-compose takes a
# network that exists), so that a connection that bypassed the router fails.
for net in $(awk '/^networks:/ { n = 1; next } /^[^ ]/ { n = 0 } n && /^  [^ ]/ { sub(/:.*/, "", $1); print $1 }' \
  "$WORK/compose/compose.yaml"); do
  podman network create --opt isolate=true --label "$LABEL" "${PROJECT}_$net" > /dev/null ||
    fail "cannot create the isolated network ${PROJECT}_$net"
done

start=$SECONDS
(cd "$WORK/compose" && podman-compose -p "$PROJECT" up -d) > "$WORK/up.log" 2>&1 ||
  fail "podman-compose up: $(tail -5 "$WORK/up.log")"
ROUTER=${PROJECT}_wan_1
# The job is over when every container but the router has exited (each
# restarts only on failure).
while ((SECONDS - start < DEADLINE_S)); do
  running=$(podman ps -q --filter "label=$LABEL" --filter status=running | wc -l)
  router_up=$(podman ps -q --filter "name=^${ROUTER}\$" --filter status=running | wc -l)
  ((running - router_up == 0)) && break
  sleep 2
done
elapsed=$((SECONDS - start))
podman stop -t 10 "$ROUTER" > /dev/null 2>&1 || true
podman ps -a --filter "label=$LABEL" --format '{{.Names}} {{.ExitCode}} {{.Networks}}' > "$WORK/containers"
dump_logs() {
  local c
  for c in $(awk '{print $1}' "$WORK/containers"); do echo "--- $c"; podman logs "$c" 2>&1 | tail -15; done
}
((running - router_up == 0)) || { dump_logs; fail "the job still ran after ${DEADLINE_S} s"; }
awk '$2 != 0 { bad = 1 } END { exit bad }' "$WORK/containers" ||
  { dump_logs; fail "a container failed: $(cat "$WORK/containers")"; }
# Each process on its region's network only; the router on all three.
awk -v r="$ROUTER" '$1 != r && $3 ~ /,/ { bad = 1 } $1 == r && gsub(/,/, ",", $3) != 2 { bad = 1 } END { exit bad }' \
  "$WORK/containers" || fail "networks are not one per region: $(cat "$WORK/containers")"

RUN=$(podman volume inspect "${PROJECT}_run" --format '{{.Mountpoint}}')
"$GEODESIC" deploy summarize "$JOB" --run-dir "$RUN" --summary-file "$WORK/summary.json" > "$WORK/summarize.log" 2>&1 ||
  { dump_logs; fail "geodesic deploy summarize: $(cat "$WORK/summarize.log")"; }
python3 - "$WORK/summary.json" <<'PY' || { dump_logs; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
acc = s["test_accuracy"]
if acc is None or acc < 0.88:
    sys.exit(f"FAIL: test accuracy {acc} under podman-compose, below 0.88")
links = {(l["from"], l["to"]): l.get("bytes", 0) for l in s["links"]}
if len(links) != 6 or min(links.values()) == 0:
    sys.exit(f"FAIL: every declared link direction should carry bytes through the router: {links}")
# What the router counted against what the shards counted: shard N (in the
# Nth region) exchanges 4/6 of its bytes with the 4 workers of other regions
# (workers run the same steps with the same codecs), all through the router.
regions = ["us", "eu", "asia"]
for n, r in enumerate(regions):
    for what, key, pairs in (("in", "bytes_received", [(o, r) for o in regions if o != r]),
                             ("out", "bytes_sent", [(r, o) for o in regions if o != r])):
        expected = s[key][f"server-{n}"] * 4 / 6
        carried = sum(links[p] for p in pairs)
        if expected > 1e6 and not 0.8 < carried / expected < 1.25:
            sys.exit(f"FAIL: {r} {what}: the router carried {carried} bytes, the shard's counts imply {expected:.0f}")
if s["pushes_acknowledged"] != s["updates_taken"]:
    sys.exit(f"FAIL: {s['pushes_acknowledged']} pushes acknowledged, {s['updates_taken']} taken")
print("links (MB): " + ", ".join(f"{a}->{b} {v / 1e6:.1f}" for (a, b), v in sorted(links.items())))
PY
count=$(wc -l < "$WORK/containers")
echo "PASS: $count containers, ${elapsed} s from up to the last exit; test accuracy" \
  "$(json_field "$WORK/summary.json" test_accuracy)"
