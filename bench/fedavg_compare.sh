#!/usr/bin/env bash
# FedAvg, Geodesic against a plain PyTorch reference (bench/fedavg_reference.py)
# on examples/federated.yaml (100 Dirichlet(0.3) clients, 10 a round, the
# CNN) or another job (JOB=..., for example examples/federated_lm.yaml: the
# GPT on fortunes, a client per file). Runs the Geodesic job, then replays
# its rounds in PyTorch from the same initial model, split, client sampling
# and batch orders, and prints the score of both (test accuracy, or
# validation loss for token data) at a few rounds, the largest difference
# over all rounds and the training seconds per round. docs/federated.md and
# docs/language-models.md have the results.
#   [JOB=examples/federated_lm.yaml] bench/fedavg_compare.sh [ROUNDS (100)] [OUT_DIR (/tmp/geodesic-fedavg)]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-100}
OUT=${2:-/tmp/geodesic-fedavg}
GEODESIC=${GEODESIC:-build/cli/geodesic}
JOB=${JOB:-examples/federated.yaml}
SET=(--set "federated.rounds=$ROUNDS")
rm -rf "$OUT" && mkdir -p "$OUT"
"$GEODESIC" partition "$JOB" "${SET[@]}" --out "$OUT/split" >/dev/null
"$GEODESIC" launch "$JOB" "${SET[@]}" --run-dir "$OUT/geodesic" --quiet
/usr/bin/python3 bench/fedavg_reference.py --run "$OUT/geodesic" --indices "$OUT/split/indices.txt" \
  --out "$OUT/reference.json" >"$OUT/reference.log"
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
geo = {r["round"]: r for r in json.load(open(out + "/geodesic/summary.json"))["federated"]["rounds"]}
reference = json.load(open(out + "/reference.json"))
metric = reference.get("metric", "test_accuracy")
ref = {r["round"]: r for r in reference["rounds"]}
print("%s per round" % metric)
print("%6s %10s %10s %8s %8s" % ("round", "geodesic", "pytorch", "diff", "rel"))
for r in sorted({1, 2, rounds // 4, rounds // 2, rounds, 10, 25, 50, 100} & set(geo) & set(ref)):
    g, p = geo[r][metric], ref[r][metric]
    print("%6d %10.4f %10.4f %+8.4f %+7.2f%%" % (r, g, p, g - p, 100 * (g - p) / p))
diffs = [abs(geo[r][metric] - ref[r][metric]) for r in ref if r in geo]
rel = [abs(geo[r][metric] - ref[r][metric]) / abs(ref[r][metric]) for r in ref if r in geo]
print("largest difference over %d rounds: %.4f (%.2f%%)" % (len(diffs), max(diffs), 100 * max(rel)))
closed = [geo[r]["wall_s"] for r in geo if geo[r]["wall_s"] is not None]
g_round = sum(closed) / len(closed)
p_round = sum(r["train_seconds"] for r in ref.values()) / len(ref)
print("seconds per round: geodesic %.3f, pytorch %.3f; pytorch / geodesic = %.2f" % (g_round, p_round, p_round / g_round))
PY
