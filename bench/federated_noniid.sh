#!/usr/bin/env bash
# Non-IID effects: test accuracy after ROUNDS rounds of examples/federated.yaml
# (100 clients, 10 a round, one local epoch, the CNN) for each partition and
# strategy, one run each, one after another. Writes OUT_DIR/noniid.csv (and
# OUT_DIR/noniid.png with matplotlib); docs/federated.md has the results.
#   bench/federated_noniid.sh [OUT_DIR (/tmp/geodesic-noniid)] [ROUNDS (100)]
# PARTITIONS and STRATEGIES (space-separated names below) pick a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/geodesic-noniid}
ROUNDS=${2:-100}
GEODESIC=${GEODESIC:-build/cli/geodesic}
read -r -a PARTS <<<"${PARTITIONS:-iid dirichlet:1.0 dirichlet:0.3 dirichlet:0.1}"
read -r -a STRATS <<<"${STRATEGIES:-fedavg fedprox fedadam scaffold}"
declare -A FLAGS=(
  [fedavg]=""
  [fedprox]="--set federated.prox_mu=0.01"
  [fedadam]="--set federated.strategy=fedadam --set training.outer_lr=0.01"
  [scaffold]="--set federated.strategy=scaffold"
)
mkdir -p "$OUT"
for p in "${PARTS[@]}"; do
  for s in "${STRATS[@]}"; do
    run="$OUT/${s}_${p/:/}"
    [[ -f "$run/summary.json" ]] && continue # done by an earlier call
    # shellcheck disable=SC2086
    "$GEODESIC" launch examples/federated.yaml --run-dir "$run" --quiet --set "data.partition=$p" \
      --set "federated.rounds=$ROUNDS" --set federated.eval_every=10 ${FLAGS[$s]}
  done
done
/usr/bin/python3 - "$OUT" "${PARTS[*]}" "${STRATS[*]}" <<'PY'
import csv, json, os, sys
out, parts, strats = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
acc = {}
for p in parts:
    for s in strats:
        path = os.path.join(out, "%s_%s" % (s, p.replace(":", "")), "summary.json")
        acc[p, s] = json.load(open(path))["test_accuracy"] if os.path.exists(path) else None
with open(os.path.join(out, "noniid.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["partition"] + strats)
    for p in parts:
        w.writerow([p] + ["" if acc[p, s] is None else "%.4f" % acc[p, s] for s in strats])
print("%-14s" % "partition" + "".join("%10s" % s for s in strats))
for p in parts:
    print("%-14s" % p + "".join("%10s" % ("-" if acc[p, s] is None else "%.4f" % acc[p, s]) for s in strats))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(strats)
    for i, s in enumerate(strats):
        ax.bar([j + i * width for j in range(len(parts))], [acc[p, s] or 0 for p in parts], width, label=s)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(parts))], parts)
    ax.set_ylim(0.5, 0.95)
    ax.set_ylabel("test accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "noniid.png"), dpi=120)
except ImportError:
    pass
PY
