#!/usr/bin/env bash
# Asynchrony pays: examples/federated.yaml (100 clients, Dirichlet(0.3),
# the CNN) with 20% of clients dropping out mid-round and 10% of devices
# five times slower, as FedAvg (10 a round, ROUNDS rounds) and as FedBuff
# (K = 10 updates a step, CONCURRENCY clients in flight, FB_STEPS steps).
# Time is the device profiles' simulated time (docs/federated.md "Edge
# conditions"); the script reports when FedBuff first reaches the accuracy
# FedAvg has after its last round, and the ratio of the two simulated
# times. Writes OUT_DIR/async.csv and, with matplotlib, OUT_DIR/async.png.
#   bench/federated_async.sh [OUT_DIR (/tmp/geodesic-async)] [ROUNDS (50)] [FB_STEPS (120)] [CONCURRENCY (20)]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/geodesic-async}
ROUNDS=${2:-50}
FB_STEPS=${3:-120}
CONCURRENCY=${4:-20}
GEODESIC=${GEODESIC:-build/cli/geodesic}
EDGE=(--set federated.dropout=0.2 --set federated.device_slow_fraction=0.1 --set federated.device_slow_factor=5
  --set federated.client_eval_samples=0 --quiet)
mkdir -p "$OUT"
[[ -f "$OUT/fedavg/summary.json" ]] || "$GEODESIC" launch examples/federated.yaml --run-dir "$OUT/fedavg" "${EDGE[@]}" \
  --set "federated.rounds=$ROUNDS" --set federated.eval_every=5
[[ -f "$OUT/fedbuff/summary.json" ]] || "$GEODESIC" launch examples/federated.yaml --run-dir "$OUT/fedbuff" "${EDGE[@]}" \
  --set "federated.rounds=$FB_STEPS" --set federated.eval_every=2 --set federated.strategy=fedbuff \
  --set "federated.concurrency=$CONCURRENCY"
/usr/bin/python3 - "$OUT" <<'PY'
import csv, json, os, sys
out = sys.argv[1]

def curve(run):
    t, points = 0.0, []
    for row in csv.DictReader(open(os.path.join(out, run, "rounds.csv"))):
        t += float(row["simulated_s"])
        if row["test_accuracy"]:
            points.append((int(row["round"]), t, float(row["test_accuracy"])))
    return points

avg, buf = curve("fedavg"), curve("fedbuff")
wall = {r: json.load(open(os.path.join(out, r, "summary.json")))["wall_seconds"] for r in ("fedavg", "fedbuff")}
target_round, target_t, target = avg[-1]
reached = next((p for p in buf if p[2] >= target), None)
with open(os.path.join(out, "async.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["strategy", "round", "simulated_s", "test_accuracy"])
    for name, pts in (("fedavg", avg), ("fedbuff", buf)):
        for p in pts:
            w.writerow([name, p[0], "%.2f" % p[1], "%.4f" % p[2]])
print("FedAvg: %.4f after %d rounds, %.1f simulated s (%.0f s on this machine)" % (target, target_round, target_t, wall["fedavg"]))
if reached:
    print("FedBuff: %.4f at step %d, %.1f simulated s: %.2fx FedAvg's time" % (reached[2], reached[0], reached[1], reached[1] / target_t))
else:
    print("FedBuff: never reached %.4f in %d steps (best %.4f)" % (target, buf[-1][0], max(p[2] for p in buf)))
print("FedBuff: %.4f after %d steps, %.1f simulated s (%.0f s on this machine)" % (buf[-1][2], buf[-1][0], buf[-1][1], wall["fedbuff"]))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in (("FedAvg", avg), ("FedBuff", buf)):
        ax.plot([p[1] for p in pts], [p[2] for p in pts], marker=".", label=name)
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("test accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "async.png"), dpi=120)
except ImportError:
    pass
PY
