#!/usr/bin/env bash
# Elastic membership, measured (issue 13): on loopback, a coordinator and
# two workers (one CPU device each) train MODEL in MODE; at step ~200 worker
# 2 is killed (kill -9), and later a new worker joins. Every log line is
# stamped on arrival, so the figures are wall-clock times between lines:
#
#   detect    kill -9            -> the coordinator's "lost node" line
#   resume    "lost node"        -> the first step line of the new view
#   join      joiner started     -> its "view N: replicas" line (it trains)
#
#   bench/elastic.sh build/cli/troupe [MODEL] [MODE]     (default mlp sync)
set -u
BIN=$(readlink -f "${1:?usage: $0 PATH/TO/troupe [MODEL] [MODE]}")
MODEL=${2:-mlp}
MODE=${3:-sync}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-elastic.XXXXXX")
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
cat > "$TMP/job.toml" <<EOF
model = "$MODEL"
data = "fashion-mnist"
seed = 5
batch = 32
epochs = 3
mode = "$MODE"
EOF
( "$BIN" node --listen "$addr" --job "$TMP/job.toml" --start-nodes 3 --devices cpu:0 --log-every 1 2>&1 | stamp > "$TMP/c.log" ) &
PIDS+=($!)
sleep 0.5
"$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 > "$TMP/w1.log" 2>&1 &
PIDS+=($!)
"$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 > "$TMP/w2.log" 2>&1 &
victim=$!
PIDS+=($victim)
until grep -q "epoch 1 step 200/" "$TMP/c.log" 2>/dev/null; do sleep 0.05; done
killed=$(date +%s.%N)
kill -9 "$victim"
until grep -q "coordinator: view 1 " "$TMP/c.log" 2>/dev/null; do sleep 0.05; done
sleep 2
joined=$(date +%s.%N)
( "$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 2>&1 | stamp > "$TMP/w3.log" ) &
PIDS+=($!)
until grep -q "view 2: replicas" "$TMP/w3.log" 2>/dev/null; do sleep 0.05; done
wait "${PIDS[0]}"

t_lost=$(grep -m1 "troupe node: lost node" "$TMP/c.log" | cut -d' ' -f1)
t_view=$(grep -m1 "coordinator: view 1 " "$TMP/c.log" | cut -d' ' -f1)
t_step=$(awk -v v="$t_view" '$1 > v && /step [0-9]+\// { print $1; exit }' "$TMP/c.log")
t_in=$(grep -m1 "view 2: replicas" "$TMP/w3.log" | cut -d' ' -f1)
lost_steps=$(grep -o "steps_discarded[^,]*" "$TMP/c.log" | tail -1)
rate() { grep "^[0-9.]* epoch $1/3:" "$TMP/c.log" | grep -o "[0-9.]*k samples/s" | head -1; }
awk -v k="$killed" -v l="$t_lost" -v v="$t_view" -v s="$t_step" -v j="$joined" -v i="$t_in" 'BEGIN {
  printf "detect (kill -9 -> lost node line)      %.3f s\n", l - k
  printf "new view (lost node -> view formed)     %.3f s\n", v - l
  printf "resume (lost node -> first step)        %.3f s\n", s - l
  printf "join (joiner started -> in the view)    %.3f s\n", i - j
}'
grep -h "coordinator: view\|trained on" "$TMP/c.log" | cut -d' ' -f2- | cut -c1-160
echo "epoch 1 (3 -> 2 nodes): $(rate 1); epoch 3 (3 nodes again): $(rate 3)"
grep -h "^[0-9.]* test accuracy" "$TMP/c.log" | cut -d' ' -f2-
