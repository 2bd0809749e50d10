#!/usr/bin/env bash
# What starting the launcher's children costs: a short run of the default
# job (SET overrides, default 0.05 epochs and two curve points) launched
# with children forked from the spawner (deploy/spawner.h) and with every
# child exec'ed (GEODESIC_SPAWN=exec), RUNS pairs, the order alternating so
# that drift cancels. Prints per run the launch's wall time, the CPU seconds
# of the coordinator, the servers and the workers together and of the
# evaluator (from the summary's `processes`, which the launcher or the
# spawner got from wait4), and the test accuracy, which must not differ.
# docs/benchmarks.md ("Starting processes") has the results.
#   bench/spawn_cost.sh [RUNS (3)] [OUT_DIR (/tmp/geodesic-spawn-cost)]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=${2:-/tmp/geodesic-spawn-cost}
GEODESIC=${GEODESIC:-build/cli/geodesic}
JOB=${JOB:-examples/fashion_mnist.yaml}
read -r -a SET <<< "${SET:---set training.epochs=0.05 --set eval.curve_points=2}"
rm -rf "$OUT" && mkdir -p "$OUT"

run() {  # MODE INDEX
  local dir=$OUT/$1-$2 t0 t1
  t0=$(date +%s.%N)
  GEODESIC_SPAWN=$1 "$GEODESIC" launch "$JOB" --run-dir "$dir" --quiet --no-dashboard --no-metrics "${SET[@]}" \
    > "$dir.log" 2>&1 || { echo "spawn_cost.sh: the $1 run failed; see $dir.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$1" "$dir/summary.json" "$t0" "$t1" <<'PY'
import json, sys
mode, path, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s = json.load(open(path))
procs = {p["name"]: p["cpu_seconds"] for p in s["processes"]}
roles = sum(v for k, v in procs.items() if k != "evaluator")
print(f"{mode:5s} wall {t1 - t0:6.1f} s  cpu: {len(procs) - 1} processes {roles:6.2f} s, "
      f"evaluator {procs.get('evaluator', 0):6.2f} s  accuracy {s['test_accuracy']}")
PY
}

for i in $(seq 1 "$RUNS"); do
  if (( i % 2 )); then run exec "$i"; run fork "$i"; else run fork "$i"; run exec "$i"; fi
done
