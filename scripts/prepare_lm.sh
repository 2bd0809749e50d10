#!/usr/bin/env bash
# What the language-model examples (examples/lm.yaml, examples/three_regions_lm.yaml)
# read, made from Debian packages on this machine (nothing is downloaded):
#
#   runs/data/fortunes/     byte-level tokens of Debian's fortunes (one document a
#                           fortune, one group a file: scripts/convert_dataset.py text)
#   runs/models/gpt-small.pt  the small GPT (scripts/export_model.py gpt, 0.9M
#                           parameters, context 128), seed 1
#
# With --pretrained, also (for examples/sweep_lm_pretrained.yaml):
#
#   runs/lm/                  a run of examples/lm.yaml (data parallel, one
#                             epoch), with build/cli/geodesic (scripts/build.sh)
#   runs/models/gpt-small-lm.pt  the GPT with that run's final values
#                             (scripts/export_model.py trained)
#
# Installs what is missing first (scripts/setup.sh lm). Idempotent: files that
# exist are kept. Then:  geodesic launch examples/lm.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
pretrained=0
case "${1:-}" in
  "") ;;
  --pretrained) pretrained=1 ;;
  *) echo "usage: scripts/prepare_lm.sh [--pretrained]" >&2; exit 2 ;;
esac
scripts/setup.sh lm

FORTUNES=/usr/share/games/fortunes
data=runs/data/fortunes
if [[ ! -f "$data/val.bin" ]]; then
  # The text files are the ones without an extension (.dat is fortune's index, .u8 a link).
  mapfile -t files < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)
  [[ ${#files[@]} -gt 0 ]] || { echo "prepare_lm: no fortune files in $FORTUNES" >&2; exit 1; }
  # Written beside and moved into place, so that a reader never sees half of it.
  tmp="$data.tmp.$$"
  /usr/bin/python3 scripts/convert_dataset.py text "$tmp" --separator % "${files[@]}"
  mv -T "$tmp" "$data" 2>/dev/null || rm -rf "$tmp"  # another run was first: keep its copy
fi
mkdir -p runs/models
if [[ ! -f runs/models/gpt-small.pt ]]; then
  /usr/bin/python3 scripts/export_model.py gpt "runs/models/gpt-small.pt.tmp.$$" --size small
  mv -f "runs/models/gpt-small.pt.tmp.$$" runs/models/gpt-small.pt
fi
echo "prepare_lm: $data and runs/models/gpt-small.pt are ready"
[[ $pretrained == 1 ]] || exit 0
if [[ ! -f runs/models/gpt-small-lm.pt ]]; then
  geodesic=build/cli/geodesic
  [[ -x $geodesic ]] || { echo "prepare_lm: $geodesic is missing: run scripts/build.sh first" >&2; exit 1; }
  if [[ ! -f runs/lm/final_params.bin ]]; then
    rm -rf runs/lm
    "$geodesic" launch examples/lm.yaml --run-dir runs/lm
  fi
  /usr/bin/python3 scripts/export_model.py trained "runs/models/gpt-small-lm.pt.tmp.$$" --run runs/lm
  mv -f "runs/models/gpt-small-lm.pt.tmp.$$" runs/models/gpt-small-lm.pt
fi
echo "prepare_lm: runs/models/gpt-small-lm.pt (the GPT after runs/lm) is ready"
