#!/usr/bin/env bash
# What observability costs training: the default job with every process
# serving /metrics, Debian's Prometheus scraping all of them every
# SCRAPE_S seconds (default 5) and one client reading the dashboard's
# /api/state every second (as the page does), against the same job with
# --no-metrics --no-dashboard. RUNS pairs, one run at a time, the order
# alternating (off first, then on first) so that drift cancels; prints each
# run's samples/s and the CPU seconds the job's own processes spent per
# 1,000 samples (the launcher and its children, from GNU time; Prometheus
# and the reader are outside it), the means and the ratios. Prometheus and
# the reader share the cores with the job, so samples/s pays for their CPU
# too; CPU per sample is what Geodesic itself spends, and a busy neighbour
# disturbs it far less than throughput.
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
  /usr/bin/time -f "%U %S" -o "$run.cpu" "$GEODESIC" launch "$JOB" --run-dir "$run" --quiet >"$run.log" 2>&1 &
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

off() {
  /usr/bin/time -f "%U %S" -o "$1.cpu" "$GEODESIC" launch "$JOB" --run-dir "$1" --quiet --no-metrics --no-dashboard \
    >"$1.log" 2>&1
}
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
summary = lambda which, r: json.load(open("%s/%s-%d/summary.json" % (out, which, r)))
rate = lambda which, r: summary(which, r)["samples_per_second"]
def cpu(which, r):  # CPU seconds per 1,000 samples, the launcher and its children
    u, s = map(float, open("%s/%s-%d.cpu" % (out, which, r)).read().split()[-2:])
    return (u + s) / summary(which, r)["samples"] * 1000
pairs = range(1, runs + 1)
off, on = [rate("off", r) for r in pairs], [rate("on", r) for r in pairs]
coff, con = [cpu("off", r) for r in pairs], [cpu("on", r) for r in pairs]
print("%4s %10s %10s %7s %12s %12s %7s" % ("pair", "off smp/s", "on smp/s", "on/off", "off cpu/1k", "on cpu/1k", "on/off"))
for i, r in enumerate(pairs):
    print("%4d %10.0f %10.0f %7.3f %12.3f %12.3f %7.3f" % (r, off[i], on[i], on[i] / off[i], coff[i], con[i], con[i] / coff[i]))
mean = lambda xs: sum(xs) / len(xs)
print("%4s %10.0f %10.0f %7.3f %12.3f %12.3f %7.3f" % ("mean", mean(off), mean(on), mean(on) / mean(off),
                                                       mean(coff), mean(con), mean(con) / mean(coff)))
PY
