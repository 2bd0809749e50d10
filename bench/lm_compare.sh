#!/usr/bin/env bash
# A language model, Geodesic against a plain PyTorch loop (bench/lm_reference.py):
# examples/lm.yaml's GPT and fortunes with one worker in BSP (one training thread)
# for STEPS steps, snapshots every 2 s, every snapshot scored. Then the same
# module file trained in PyTorch on the same windows in the same order with the
# same optimizer and schedule, scored at the same steps; prints both validation
# loss curves, the largest difference, and tokens per second of each on one
# thread. docs/language-models.md has the results.
#   scripts/prepare_lm.sh && bench/lm_compare.sh [STEPS (300)] [OUT_DIR (/tmp/geodesic-lm)]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
OUT=${2:-/tmp/geodesic-lm}
GEODESIC=${GEODESIC:-build/cli/geodesic}
JOB=examples/lm.yaml
SET=(--set "regions.local.workers=1" --set "training.steps=$STEPS" --set "training.threads=1"
  --set "eval.snapshot_every_s=2" --set "eval.curve_points=0" --set "eval.test_samples=256")
rm -rf "$OUT" && mkdir -p "$OUT"
"$GEODESIC" partition "$JOB" "${SET[@]}" --out "$OUT/split" >/dev/null
"$GEODESIC" launch "$JOB" "${SET[@]}" --run-dir "$OUT/geodesic" --quiet
# One thread in both: the launcher runs its workers with OPENBLAS_NUM_THREADS=1
# (OpenBLAS keeps its own threads, whatever torch.set_num_threads says), so
# the reference does too.
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/lm_reference.py --run "$OUT/geodesic" --indices "$OUT/split/indices.txt" --threads 1 \
  --out "$OUT/reference.json" >"$OUT/reference.log"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
s = json.load(open(out + "/geodesic/summary.json"))
r = json.load(open(out + "/reference.json"))
print("%6s %12s %12s %12s" % ("step", "geodesic", "pytorch", "diff"))
for row in r["curve"]:
    print("%6d %12.6f %12.6f %+12.2e" % (row["step"], row["geodesic"], row["pytorch"], row["diff"]))
print("largest difference over %d points: %.2e" % (len(r["curve"]), r["largest_difference"]))
context = json.load(open(out + "/geodesic/summary.json"))["model"]
job_tokens = s["samples"] * int(open(out + "/geodesic/job.yaml").read().split("context: ")[1].split()[0])
g = job_tokens / s["wall_seconds"]
print("tokens/s on one thread: geodesic %.0f (worker wall clock), pytorch %.0f (its loop); geodesic / pytorch = %.2f"
      % (g, r["tokens_per_second"], g / r["tokens_per_second"]))
PY
