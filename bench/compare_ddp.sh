#!/usr/bin/env bash
# troupe on 2 CPU devices x 1 thread in one process against PyTorch DDP with
# 2 ranks (Gloo, loopback, 1 thread each), in one run: the same model, data,
# per-replica batch (64) and Adam 1e-3. Also troupe on 1 device (scaling
# efficiency) and in async and ssp:2 modes.
#
#   bench/compare_ddp.sh mlp      # or cnn
set -euo pipefail
model=${1:-mlp}
steps=${2:-400}
source "$(dirname "$0")/anchor.sh"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== PyTorch DDP (Gloo), 2 ranks x 1 thread, $model, $steps steps, batch 64 per rank"
OMP_NUM_THREADS=1 /usr/bin/python3 "$anchor" ddp "$model" "$steps" 2 | tee "$out/ddp.txt"
ddp=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$out/ddp.txt" | tail -1)

run() {  # name, extra troupe arguments
  local name=$1; shift
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/cli/troupe" train --model "$model" --data fashion-mnist \
    --batch 64 --optimizer adam --lr 1e-3 --threads 1 --steps "$steps" --log-every 0 \
    --summary-json "$out/$name.json" "$@" > /dev/null 2> "$out/$name.log"
  sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$out/$name.json"
}
sync2=$(run sync2 --devices cpu:0,cpu:1 --mode sync)
one=$(run one --devices cpu:0)
async2=$(run async2 --devices cpu:0,cpu:1 --mode async)
ssp2=$(run ssp2 --devices cpu:0,cpu:1 --mode ssp:2)
ratio=$(awk -v a="$sync2" -v b="$ddp" 'BEGIN { printf "%.2f", a / b }')
efficiency=$(awk -v a="$sync2" -v b="$one" 'BEGIN { printf "%.0f", 100 * a / (2 * b) }')
echo "RESULT compare-ddp $model steps=$steps ddp_samples_per_s=$ddp troupe_sync2_samples_per_s=$sync2 ratio=$ratio troupe_1dev_samples_per_s=$one scaling_efficiency_pct=$efficiency troupe_async2_samples_per_s=$async2 troupe_ssp2_samples_per_s=$ssp2"
