#!/usr/bin/env bash
# troupe as 2 nodes x 1 CPU device (two `troupe node` processes on loopback:
# a coordinator and a worker, gradients on the tcp ring) against PyTorch DDP
# with 2 ranks (Gloo, loopback, 1 thread each), in one run: the same model,
# data, per-replica batch (64), Adam 1e-3 and step count.
#
#   bench/compare_ddp_nodes.sh mlp [steps]     # or cnn
set -euo pipefail
model=${1:-mlp}
steps=${2:-400}
source "$(dirname "$0")/anchor.sh"

out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

echo "== PyTorch DDP (Gloo), 2 ranks x 1 thread, $model, $steps steps, batch 64 per rank"
OMP_NUM_THREADS=1 /usr/bin/python3 "$anchor" ddp "$model" "$steps" 2 | tee "$out/ddp.txt"
ddp=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$out/ddp.txt" | tail -1)

cat > "$out/job.toml" <<JOB
model = "$model"
data = "fashion-mnist"
epochs = 100
steps = $steps
batch = 64
lr = 1e-3
mode = "sync"
[optimizer]
name = "adam"
JOB

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "== troupe, 2 nodes x 1 CPU device (coordinator + worker processes), $model, $steps steps, batch 64 per replica"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$build/cli/troupe" node --listen "127.0.0.1:$port" --job "$out/job.toml" --min-nodes 2 --devices cpu:0 \
  --threads 1 --log-every 0 --summary-json "$out/nodes.json" > "$out/coordinator.log" 2>&1 &
coordinator=$!
"$build/cli/troupe" node --join "127.0.0.1:$port" --devices cpu:0 --threads 1 > "$out/worker.log" 2>&1 &
worker=$!
wait $coordinator || { cat "$out/coordinator.log" >&2; exit 1; }
wait $worker || { cat "$out/worker.log" >&2; exit 1; }
nodes=$(sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$out/nodes.json")
ratio=$(awk -v a="$nodes" -v b="$ddp" 'BEGIN { printf "%.2f", a / b }')
echo "RESULT compare-ddp-nodes $model steps=$steps ddp_samples_per_s=$ddp troupe_2nodes_samples_per_s=$nodes ratio=$ratio"
