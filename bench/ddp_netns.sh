#!/usr/bin/env bash
# PyTorch DDP (gloo) on the reference CNN, the baseline for Geodesic's
# three-region experiment: 6 ranks, 2 per region, over the kernel-emulated
# links (root: deploy/netns/netns.sh; us-eu 80 ms RTT 100 Mbit/s, us-asia
# 160 ms 50 Mbit/s 1% loss, eu-asia 120 ms 50 Mbit/s, as
# examples/three_regions_netns.yaml), and the same 6 ranks on plain loopback.
#
#   bench/ddp_netns.sh [--mode both|netns|loopback] [--epochs 3] [--timeout 1200] [--out runs/ddp]
#
# Ranks 0-1 run in gd-us (the master, 10.77.1.2), 2-3 in gd-eu, 4-5 in
# gd-asia, each under `ip netns exec`. Every run is bounded by --timeout
# seconds; the topology is always taken down. Writes OUT/<mode>/result.json
# (rank 0's, see bench/ddp_baseline.py), OUT/<mode>/rank-N.log, and prints
# time to target and final accuracy.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
NETNS=$ROOT/deploy/netns/netns.sh
PY=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch lives there
MODE=both EPOCHS=3 TIMEOUT=1200 OUT=runs/ddp PORT=29500
EXTRA=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --mode) MODE=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;  # passed to ddp_baseline.py
    *) echo "usage: $0 [--mode both|netns|loopback] [--epochs N] [--timeout S] [--out DIR] [-- ddp_baseline args]" >&2; exit 2 ;;
  esac
done
"$PY" -c 'import torch' 2>/dev/null || { echo "ddp_netns.sh: $PY has no torch; apt-get install python3-torch" >&2; exit 1; }

REGIONS=(us us eu eu asia asia)
WORLD=${#REGIONS[@]}

# run MODE: starts every rank, waits (bounded), prints the result line.
run() {
  local mode=$1 dir=$OUT/$1 master pids=() r
  mkdir -p "$dir"
  [[ $mode == netns ]] && master=10.77.1.2 || master=127.0.0.1
  local t0=$SECONDS
  for ((r = 0; r < WORLD; r++)); do
    local cmd=(env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1)
    if [[ $mode == netns ]]; then
      cmd=(ip netns exec "gd-${REGIONS[$r]}" "${cmd[@]}" GLOO_SOCKET_IFNAME=gdv0)
    else
      cmd+=(GLOO_SOCKET_IFNAME=lo)
    fi
    timeout -k 5 "$TIMEOUT" "${cmd[@]}" "$PY" "$HERE/ddp_baseline.py" --rank "$r" --world-size "$WORLD" \
      --master-addr "$master" --master-port "$PORT" --epochs "$EPOCHS" --out "$dir/result.json" "${EXTRA[@]}" \
      >"$dir/rank-$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0 p
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  if [[ $rc -ne 0 || ! -f $dir/result.json ]]; then
    echo "ddp_netns.sh: $mode: failed (exit $rc) after $((SECONDS - t0)) s; rank 0's log ends:" >&2
    tail -5 "$dir/rank-0.log" >&2
    return 1
  fi
  "$PY" - "$mode" "$dir/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
t = r["seconds_to_target"]
print(f"ddp {sys.argv[1]:8s}: {'reached %.2f at %.1f s' % (r['target_accuracy'], t) if t is not None else 'target %.2f not reached' % r['target_accuracy']}; "
      f"final test accuracy {r['final_test_accuracy']:.4f} after {r['train_seconds']:.1f} s of training, {r['steps']} steps, "
      f"{r['samples_per_second']:.0f} samples/s (curve on {r['eval_samples']} test samples)")
EOF
}

status=0
if [[ $MODE == both || $MODE == loopback ]]; then
  run loopback || status=1
fi
if [[ $MODE == both || $MODE == netns ]]; then
  mkdir -p "$OUT/netns"
  cat >"$OUT/netns/netns.conf" <<'EOF'
# examples/three_regions_netns.yaml's links (one-way delay = RTT / 2)
region us
region eu
region asia
link us eu 40 0 100 0
link eu us 40 0 100 0
link us asia 80 0 50 0.01
link asia us 80 0 50 0.01
link eu asia 60 0 50 0
link asia eu 60 0 50 0
EOF
  trap '"$NETNS" down >/dev/null 2>&1 || true' EXIT
  "$NETNS" up "$OUT/netns/netns.conf"
  run netns || status=1
  "$NETNS" down
fi
exit $status
