#!/usr/bin/env bash
# Old binary against new, alternating in one run, so that a refactor's cost
# (or gain) shows as a ratio measured side by side on a noisy machine:
#   - the default job's samples per second (examples/fashion_mnist.yaml,
#     one epoch by default), from each run's summary.json;
#   - `geodesic bench transport` at 16 and 64 MB: push+pull goodput through
#     one shard and its ratio to raw ZeroMQ in the same rounds.
# Usage: bench/compare_binaries.sh OLD_BINARY NEW_BINARY [ROUNDS=3] [EPOCHS=1]
# Prints one line per run and the median of each measure per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 rounds=${3:-3} epochs=${4:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for which in old new; do
    bin=${!which}
    "$bin" launch examples/fashion_mnist.yaml --set training.epochs="$epochs" --set "name=cmp-$which" \
      --summary "$out/$which-$r.json" >"$out/$which-$r.log" 2>&1
    sps=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["samples_per_second"]))' "$out/$which-$r.json")
    "$bin" bench transport --sizes-mb 16 64 --seconds 3 --json 2>/dev/null >"$out/$which-$r-t.json"
    read -r t16 t64 < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(*["%.3f" % x["ratio"] for x in r])' "$out/$which-$r-t.json")
    echo "round $r $which: default job $sps samples/s; transport/raw ZeroMQ 16 MB $t16, 64 MB $t64"
    echo "$which $sps $t16 $t64" >>"$out/all"
  done
done
python3 - "$out/all" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {w: [statistics.median(float(r[i]) for r in rows if r[0] == w) for i in (1, 2, 3)] for w in ("old", "new")}
for w in ("old", "new"):
    print(f"median {w}: {med[w][0]:.0f} samples/s; transport ratio 16 MB {med[w][1]:.3f}, 64 MB {med[w][2]:.3f}")
print(f"new/old: samples/s {med['new'][0]/med['old'][0]:.3f}; transport 16 MB {med['new'][1]/med['old'][1]:.3f}, 64 MB {med['new'][2]/med['old'][2]:.3f}")
PY
