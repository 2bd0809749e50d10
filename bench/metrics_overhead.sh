#!/usr/bin/env bash
# What observability costs training: the default job with every process
# serving /metrics, Debian's Prometheus scraping all of them every
# SCRAPE_S seconds (default 5) and one client reading the dashboard's
# /api/state every second (as the page does), against the same job with
# --no-metrics --no-dashboard. RUNS pairs, one run at a time, the order
# alternating (off first, then on first) so that drift cancels; prints each
# run's samples/s, the means and the ratio. Prometheus and the client run
# on the same cores as the job here, so their own CPU counts against "on".
# docs/observability.md has the results.
#   bench/metrics_overhead.sh [RUNS (4)] [OUT_DIR (/tmp/geodesic-metrics-overhead)]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-4}
SCRAPE_S=${SCRAPE_S:-5}
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
  "$GEODESIC" metrics scrape-config "$run" --interval "$SCRAPE_S" --out "$run.prom.yml"
  prometheus --config.file="$run.prom.yml" --storage.tsdb.path="$run.tsdb" \
    --web.listen-address=127.0.0.1:0 >"$run.prometheus.log" 2>&1 &
  local prom=$!
  PIDS=("$prom")
  # One reader of the dashboard's state, once a second, while the job runs.
  /usr/bin/python3 - "$(cat "$run/http/dashboard")" "$launch" <<'PY' &
import os, sys, time, urllib.request
address, launch = sys.argv[1], int(sys.argv[2])
while os.path.exists("/proc/%d" % launch):
    try:
        urllib.request.urlopen("http://%s/api/state" % address, timeout=2).read()
    except OSError:
        pass
    time.sleep(1)
PY
  local reader=$!
  wait "$launch"
  wait "$reader" 2>/dev/null || true
  kill "$prom" 2>/dev/null || true
  wait "$prom" 2>/dev/null || true
}

off() { "$GEODESIC" launch "$JOB" --run-dir "$1" --quiet --no-metrics --no-dashboard >"$1.log" 2>&1; }
for r in $(seq 1 "$RUNS"); do
  if ((r % 2)); then
    off "$OUT/off-$r"
    watched "$OUT/on-$r"
  else
    watched "$OUT/on-$r"
    off "$OUT/off-$r"
  fi
  echo "pair $r done" >&2
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
