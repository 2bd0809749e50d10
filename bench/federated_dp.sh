#!/usr/bin/env bash
# DP-FedAvg: test accuracy against epsilon for a few noise multipliers, on
# examples/federated.yaml scaled to 1,000 clients, 100 a round (sampling
# rate 0.1), 50 rounds, updates clipped to CLIP. docs/federated.md has the
# results. Writes OUT_DIR/dp.csv and, with matplotlib, OUT_DIR/dp.png.
#   bench/federated_dp.sh [OUT_DIR (/tmp/geodesic-dp)] [CLIP (0.5)] [Z ... (0.3 0.6 1.2)]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/geodesic-dp}
CLIP=${2:-0.5}
shift $(($# > 2 ? 2 : $#))
NOISE=("$@")
((${#NOISE[@]})) || NOISE=(0.3 0.6 1.2)
GEODESIC=${GEODESIC:-build/cli/geodesic}
SET=(--set federated.clients=1000 --set federated.per_round=100 --set federated.rounds=50
  --set federated.client_eval_samples=0 --set eval.test_samples=2000 --quiet)
rm -rf "$OUT" && mkdir -p "$OUT"
"$GEODESIC" launch examples/federated.yaml --run-dir "$OUT/no-dp" "${SET[@]}"
for z in "${NOISE[@]}"; do
  "$GEODESIC" launch examples/federated.yaml --run-dir "$OUT/z$z" "${SET[@]}" \
    --set "federated.dp_clip_norm=$CLIP" --set "federated.dp_noise_multiplier=$z"
done
/usr/bin/python3 - "$OUT" "${NOISE[@]}" <<'PY'
import json, sys
out, noise = sys.argv[1], sys.argv[2:]
rows = [("no-dp", None, None, json.load(open(out + "/no-dp/summary.json")))]
rows += [("z" + z, float(z), None, json.load(open("%s/z%s/summary.json" % (out, z)))) for z in noise]
with open(out + "/dp.csv", "w") as f:
    f.write("run,noise_multiplier,epsilon,delta,clipped_share,test_accuracy\n")
    print("%-8s %6s %9s %8s %9s" % ("run", "z", "epsilon", "clipped", "accuracy"))
    for name, z, _, s in rows:
        fed = s["federated"]
        dp = fed.get("dp")
        eps = dp["epsilon"] if dp else None
        clipped = fed.get("client_updates_clipped", 0) / max(1, fed["clients_trained"])
        f.write("%s,%s,%s,%s,%.3f,%.4f\n" % (name, z or "", eps or "", dp["delta"] if dp else "", clipped, s["test_accuracy"]))
        print("%-8s %6s %9s %8.2f %9.4f" % (name, z or "-", "%.2f" % eps if eps else "inf", clipped, s["test_accuracy"]))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [(r[3]["federated"]["dp"]["epsilon"], r[3]["test_accuracy"], r[0]) for r in rows[1:]]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="DP-FedAvg")
    for e, a, n in pts:
        ax.annotate(n, (e, a), textcoords="offset points", xytext=(4, 4))
    ax.axhline(rows[0][3]["test_accuracy"], linestyle="--", color="gray", label="no DP")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon (delta 1e-5) after 50 rounds")
    ax.set_ylabel("test accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out + "/dp.png", dpi=120)
    print("wrote " + out + "/dp.png")
except ImportError:
    pass
PY
