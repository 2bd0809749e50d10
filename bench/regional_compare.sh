#!/usr/bin/env bash
# Regional aggregation side by side (docs/wan.md "Regional aggregation"):
# JOB (default examples/regional.yaml) launched without and with an
# aggregator in every region, in ABBA order REPEATS times, on emulated
# links. Prints each run's training time, time to the job's target accuracy
# (eval.target_accuracy; "-" when not reached), WAN bytes (all link
# directions, counted by the emulator since its start-up probes), test
# accuracy, and whether the final parameters equal the flat run's, bit for bit.
#   bench/regional_compare.sh [JOB] [REPEATS (1)] [OUT_DIR (/tmp/geodesic-regional)] [--set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
JOB=${1:-examples/regional.yaml}
REPEATS=${2:-1}
OUT=${3:-/tmp/geodesic-regional}
shift $(($# < 3 ? $# : 3))
EXTRA=("$@")
GEODESIC=${GEODESIC:-build/cli/geodesic}
# The region names: the keys indented by two spaces under `regions:`.
REGIONS=$(awk '/^regions:/ {in_r = 1; next} /^[^ #]/ {in_r = 0} in_r && /^  [A-Za-z0-9_-]+:/ {sub(/^  /, ""); sub(/:.*/, ""); print}' "$JOB")
rm -rf "$OUT" && mkdir -p "$OUT"
run() {  # run NAME on|off
  local sets=()
  for r in $REGIONS; do sets+=(--set "regions.$r.aggregator=$([ "$2" = on ] && echo true || echo false)"); done
  "$GEODESIC" launch "$JOB" "${sets[@]}" "${EXTRA[@]}" --run-dir "$OUT/$1" --quiet --no-dashboard --no-metrics \
    >"$OUT/$1.log" 2>&1
}
for i in $(seq 1 "$REPEATS"); do
  if ((i % 2)); then order="off on"; else order="on off"; fi
  for mode in $order; do run "$mode-$i" "$mode"; done
done
/usr/bin/python3 - "$OUT" "$REPEATS" <<'PY'
import json, sys
out, repeats = sys.argv[1], int(sys.argv[2])
print("%-8s %10s %12s %12s %10s %s" % ("run", "train s", "to target s", "WAN MB", "accuracy", "params"))
for i in range(1, repeats + 1):
    flat = open("%s/off-%d/final_params.bin" % (out, i), "rb").read()
    for mode in ("off", "on"):
        d = "%s/%s-%d" % (out, mode, i)
        s = json.load(open(d + "/summary.json"))
        wan = sum(l.get("bytes", 0) for l in s.get("links", [])) / 1e6
        same = open(d + "/final_params.bin", "rb").read() == flat
        target = s.get("seconds_to_target")
        print("%-8s %10.1f %12s %12.1f %10.4f %s" % ("%s-%d" % (mode, i), s["wall_seconds"],
                                                     "%.1f" % target if isinstance(target, (int, float)) else "-",
                                                     wan, s["test_accuracy"], "= flat" if same else "DIFFERENT"))
PY
