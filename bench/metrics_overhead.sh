#!/usr/bin/env bash
# What observability costs training: the default job with every process
# serving /metrics, Debian's Prometheus scraping all of them every second
# and a client reading the dashboard's /api/state every second (as the
# page does), against the same job with --no-metrics --no-dashboard.
# Alternately, RUNS times each, on one machine, one run at a time; prints
# each run's samples/s, the means and the ratio. docs/observability.md has
# the results.
#   bench/metrics_overhead.sh [RUNS (3)] [OUT_DIR (/tmp/geodesic-metrics-overhead)]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=${2:-/tmp/geodesic-metrics-overhead}
GEODESIC=${GEODESIC:-build/cli/geodesic}
JOB=${JOB:-examples/fashion_mnist.yaml}
command -v prometheus >/dev/null || { echo "metrics_overhead.sh: apt-get install prometheus" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# RUN_DIR: the job with its metrics scraped and its dashboard read.
watched() {
  local run=$1
  "$GEODESIC" launch "$JOB" --run-dir "$run" --quiet >"$run.log" 2>&1 &
  local launch=$!
  for _ in $(seq 1 600); do [[ -s "$run/http/dashboard" ]] && break; sleep 0.1; done
  sleep 3  # every process has bound its endpoint by now
  "$GEODESIC" metrics scrape-config "$run" --interval 1 --out "$run.prom.yml"
  prometheus --config.file="$run.prom.yml" --storage.tsdb.path="$run.tsdb" \
    --web.listen-address=127.0.0.1:0 >"$run.prometheus.log" 2>&1 &
  local prom=$!
  PIDS=("$prom")
  local dash
  dash=$(cat "$run/http/dashboard")
  while kill -0 "$launch" 2>/dev/null; do
    /usr/bin/python3 -c "import urllib.request as u; u.urlopen('http://$dash/api/state', timeout=2).read()" \
      2>/dev/null || true
    sleep 1
  done
  wait "$launch"
  kill "$prom" 2>/dev/null || true
  wait "$prom" 2>/dev/null || true
}

for r in $(seq 1 "$RUNS"); do
  "$GEODESIC" launch "$JOB" --run-dir "$OUT/off-$r" --quiet --no-metrics --no-dashboard >"$OUT/off-$r.log" 2>&1
  watched "$OUT/on-$r"
  echo "run $r done" >&2
done

/usr/bin/python3 - "$OUT" "$RUNS" <<'PY'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
rate = lambda which, r: json.load(open("%s/%s-%d/summary.json" % (out, which, r)))["samples_per_second"]
off = [rate("off", r) for r in range(1, runs + 1)]
on = [rate("on", r) for r in range(1, runs + 1)]
print("%4s %14s %14s %8s" % ("run", "off samples/s", "on samples/s", "on/off"))
for r in range(runs):
    print("%4d %14.0f %14.0f %8.3f" % (r + 1, off[r], on[r], on[r] / off[r]))
mean = lambda xs: sum(xs) / len(xs)
print("%4s %14.0f %14.0f %8.3f" % ("mean", mean(off), mean(on), mean(on) / mean(off)))
PY
