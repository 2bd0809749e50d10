#!/usr/bin/env bash
# The reference CNN built in (LibTorch's C++ modules) against the same
# architecture exported from PyTorch as TorchScript (scripts/export_model.py
# cnn), alternating in one run, through `geodesic launch` of the default job
# (examples/fashion_mnist.yaml: 2 shards, 4 workers, BSP). What the
# interpreter costs shows as a ratio measured side by side on a noisy machine.
# Usage: bench/torchscript_vs_builtin.sh [ROUNDS=1] [EPOCHS=3] [GEODESIC=build/cli/geodesic]
# Prints one line per run and, per model, the median test accuracy,
# samples per second, seconds to 88% and accuracy curve (at each sixth of
# the steps), then the samples/s ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1} epochs=${2:-3} bin=${3:-build/cli/geodesic}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 scripts/export_model.py cnn "$out/cnn.pt"
for ((r = 1; r <= rounds; r++)); do
  for which in builtin torchscript; do
    model=(--set model.name=cnn)
    [[ $which == torchscript ]] && model=(--set model.name=torchscript --set model.path="$out/cnn.pt")
    "$bin" launch examples/fashion_mnist.yaml --set training.epochs="$epochs" --set "name=ts-$which" "${model[@]}" \
      --quiet --summary "$out/$which-$r.json" >"$out/$which-$r.log" 2>&1 || { cat "$out/$which-$r.log"; exit 1; }
    python3 - "$which" "$r" "$out/$which-$r.json" <<'PY' | tee -a "$out/all"
import json, sys
s = json.load(open(sys.argv[3]))
# The accuracy curve ([seconds, worker 0's step, accuracy] per snapshot) at
# each sixth of the steps: speed-independent, so the two models' curves compare.
curve = s["accuracy_curve"]
total = curve[-1][1]
at = [next((p[2] for p in curve if p[1] >= k * total / 6), curve[-1][2]) for k in range(1, 7)]
print(sys.argv[1], sys.argv[2], s["test_accuracy"], s["samples_per_second"], s.get("seconds_to_target") or "nan",
      *("%.4f" % a for a in at))
PY
  done
done
python3 - "$out/all" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for w in ("builtin", "torchscript"):
    cols = [[float(r[i]) for r in rows if r[0] == w] for i in (2, 3, 4)]
    med[w] = [statistics.median(c) for c in cols]
    curve = [statistics.median(float(r[i]) for r in rows if r[0] == w) for i in range(5, 11)]
    print(f"{w:12s} accuracy {med[w][0]:.4f}  {med[w][1]:.0f} samples/s  {med[w][2]:.1f} s to 88%  "
          f"curve at each sixth of the steps: {' '.join('%.4f' % a for a in curve)}")
print(f"torchscript / builtin samples/s: {med['torchscript'][1] / med['builtin'][1]:.3f}")
PY
