#!/usr/bin/env bash
# Elastic membership, measured: on loopback, a coordinator and
# two workers (one CPU device each) train MODEL in MODE; at step 200 of
# epoch 1 worker 2 is hit by FAULT (kill: kill -9, a dead process; stop:
# SIGSTOP, a silent one, found by the heartbeats), and 2 s after the new
# view a new worker joins. Every log line is stamped on arrival, so the
# figures are wall-clock times between lines:
#
#   detect    the fault          -> the coordinator's "lost node" line
#   resume    "lost node"        -> the first step line of the new view
#   join      joiner started     -> its "view N: replicas" line (it trains)
#   rolled    survivors that had not completed the step in flight and took
#             the state of one that had (roll forward; async/ssp: none)
#
# and the samples/s of epoch 1 (3 -> 2 nodes) and epoch 3 (3 nodes again).
# TRIALS runs (default 3); the last lines give the medians.
#
#   bench/elastic.sh build/cli/troupe [MODEL] [MODE] [FAULT]    (default mlp sync kill)
#   TRIALS=5 bench/elastic.sh build/cli/troupe cnn async stop
set -u
BIN=$(readlink -f "${1:?usage: $0 PATH/TO/troupe [MODEL] [MODE] [kill|stop]}")
MODEL=${2:-mlp}
MODE=${3:-sync}
FAULT=${4:-kill}
TRIALS=${TRIALS:-3}
case $FAULT in kill) SIG=-9 ;; stop) SIG=-STOP ;; *) echo "FAULT must be kill or stop" >&2; exit 2 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-elastic.XXXXXX")
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

# Stamps each line with its arrival time. One process for the whole stream:
# a `date` per line fell behind async's thousands of lines per second and
# added its lag to every figure.
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin: sys.stdout.write("%.6f %s" % (time.time(), line))'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rate() { grep "^[0-9.]* epoch $2/3:" "$1" | grep -o "[0-9.]*k samples/s" | head -1 | tr -d 'k samples/'; }

echo "elastic: $MODEL $MODE, fault $FAULT at step 200 of epoch 1, $TRIALS trial(s)"
for ((t = 1; t <= TRIALS; t++)); do
  d="$TMP/$t"
  mkdir -p "$d"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  addr=127.0.0.1:$port
  printf 'model = "%s"\ndata = "fashion-mnist"\nseed = 5\nbatch = 32\nepochs = 3\nmode = "%s"\n' "$MODEL" "$MODE" >"$d/job.toml"
  ( "$BIN" node --listen "$addr" --job "$d/job.toml" --start-nodes 3 --devices cpu:0 --log-every 1 2>&1 | stamp > "$d/c.log" ) &
  cpid=$!
  PIDS+=($cpid)
  sleep 0.5
  "$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 > "$d/w1.log" 2>&1 &
  PIDS+=($!)
  "$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 > "$d/w2.log" 2>&1 &
  victim=$!
  PIDS+=($victim)
  until grep -q "epoch 1 step 200/" "$d/c.log" 2>/dev/null; do sleep 0.02; done
  hit=$(date +%s.%N)
  kill $SIG "$victim"
  until grep -q "coordinator: view 1 " "$d/c.log" 2>/dev/null; do sleep 0.05; done
  sleep 2
  joined=$(date +%s.%N)
  ( "$BIN" node --join "$addr" --devices cpu:0 --rejoin-timeout 0 2>&1 | stamp > "$d/w3.log" ) &
  PIDS+=($!)
  until grep -q "view 2: replicas" "$d/w3.log" 2>/dev/null; do sleep 0.05; done
  wait "$cpid"
  kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
  t_lost=$(grep -m1 "troupe node: lost node" "$d/c.log" | cut -d' ' -f1)
  t_view=$(grep -m1 "coordinator: view 1 " "$d/c.log" | cut -d' ' -f1)
  t_step=$(awk -v v="$t_view" '$1 > v && /step [0-9]+\// { print $1; exit }' "$d/c.log")
  t_in=$(grep -m1 "view 2: replicas" "$d/w3.log" | cut -d' ' -f1)
  rolled=$(grep -m1 "coordinator: view 1 " "$d/c.log" | grep -o "view 1 at .*: [0-9]* survivor(s) that had not" | grep -o "[0-9]* survivor" | grep -o "^[0-9]*")
  acc=$(grep -h "^[0-9.]* test accuracy" "$d/c.log" | awk '{print $4}')
  awk -v k="$hit" -v l="$t_lost" -v v="$t_view" -v s="$t_step" -v j="$joined" -v i="$t_in" \
      -v r="${rolled:-0}" -v e1="$(rate "$d/c.log" 1)" -v e3="$(rate "$d/c.log" 3)" -v a="$acc" -v t="$t" 'BEGIN {
    printf "trial %d: detect %.3f s  new view %.3f s  resume %.3f s  join %.3f s  rolled forward %d  epoch 1 %sk/s  epoch 3 %sk/s  accuracy %s\n",
           t, l - k, v - l, s - l, i - j, r, e1, e3, a
  }' | tee -a "$TMP/trials"
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  PIDS=()
done
echo "medians over $TRIALS trial(s):"
for f in detect "new view" resume join; do
  printf '  %-10s %s s\n' "$f" "$(grep -o "$f [0-9.]*" "$TMP/trials" | awk '{print $NF}' | median)"
done
printf '  %-10s %s (most over trials: %s)\n' "rolled forward" "$(grep -o 'rolled forward [0-9]*' "$TMP/trials" | awk '{print $3}' | median)" \
  "$(grep -o 'rolled forward [0-9]*' "$TMP/trials" | awk '{print $3}' | sort -n | tail -1)"
printf '  %-10s %sk samples/s (epoch 1, 3 -> 2 nodes), %sk samples/s (epoch 3, 3 nodes)\n' "rate" \
  "$(grep -o 'epoch 1 [0-9.]*' "$TMP/trials" | awk '{print $3}' | median)" \
  "$(grep -o 'epoch 3 [0-9.]*' "$TMP/trials" | awk '{print $3}' | median)"
