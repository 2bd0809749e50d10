#!/usr/bin/env bash
# DiLoCo, Geodesic against plain PyTorch (bench/diloco_reference.py):
# examples/lm.yaml's GPT and fortunes with three workers in synchronous
# DiLoCo (rounds of H inner AdamW steps, outer Nesterov 0.7 / 0.9, fp32 both
# ways, rounds not overlapped) for STEPS steps, the global model scored at
# every round's start. Then the same module file trained by three simulated
# workers in one PyTorch process on the same windows in the same orders, the
# same inner and outer steps, scored at the same steps; prints both curves
# and the largest difference. docs/language-models.md has the results.
#   scripts/prepare_lm.sh && bench/diloco_compare.sh [STEPS (200)] [H (50)] [OUT_DIR (/tmp/geodesic-diloco)]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-200}
H=${2:-50}
OUT=${3:-/tmp/geodesic-diloco}
GEODESIC=${GEODESIC:-build/cli/geodesic}
JOB=examples/lm.yaml
SET=(--set "regions.local.workers=3" --set "training.steps=$STEPS" --set "training.threads=1"
  --set "training.local_steps=$H" --set "training.overlap_rounds=false" --set "training.outer_lr=0.7"
  --set "training.outer_momentum=0.9" --set "training.outer_nesterov=true"
  --set "eval.snapshot_every_s=0.01" --set "eval.curve_points=0" --set "eval.test_samples=256")
rm -rf "$OUT" && mkdir -p "$OUT"
"$GEODESIC" partition "$JOB" "${SET[@]}" --out "$OUT/split" >/dev/null
"$GEODESIC" launch "$JOB" "${SET[@]}" --run-dir "$OUT/geodesic" --quiet --no-dashboard
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/diloco_reference.py --run "$OUT/geodesic" \
  --indices "$OUT/split/indices.txt" --threads 1 --out "$OUT/reference.json" >"$OUT/reference.log"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/reference.json"))
print("%6s %12s %12s %12s" % ("step", "geodesic", "pytorch", "diff"))
for row in r["curve"]:
    print("%6s %12.6f %12.6f %+12.2e" % (row["step"], row["geodesic"], row["pytorch"], row["diff"]))
print("largest difference over %d points (%d workers, rounds of %d steps): %.2e"
      % (len(r["curve"]), r["workers"], r["local_steps"], r["largest_difference"]))
PY
