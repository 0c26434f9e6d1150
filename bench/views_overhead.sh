#!/usr/bin/env bash
# What elastic membership costs when nothing joins or leaves (the goal: the
# view tags must cost < 2%). Runs the same 3-node job (a coordinator and two
# workers on loopback, one CPU device each) with two troupe binaries,
# interleaved round by round so that the machine's load hits both alike:
# BEFORE, a build from before views (e.g. commit ea08e74), and AFTER, this
# build. Prints each run's samples/s (the coordinator's final line) and the
# CPU time (user + sys) the three processes used per 1000 examples, which a
# busy machine disturbs less than the wall time; then the medians and the
# median of the rounds' ratios.
#
#   bench/views_overhead.sh BEFORE/troupe AFTER/troupe [MODEL] [MODE]   (default mlp sync)
#   ROUNDS=5 EPOCHS=1 bench/views_overhead.sh ...
set -u
BEFORE=$(readlink -f "${1:?usage: $0 BEFORE/troupe AFTER/troupe [MODEL] [MODE]}")
AFTER=$(readlink -f "${2:?usage: $0 BEFORE/troupe AFTER/troupe [MODEL] [MODE]}")
MODEL=${3:-mlp}
MODE=${4:-sync}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-views.XXXXXX")
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
printf 'model = "%s"\ndata = "fashion-mnist"\nseed = 5\nbatch = 32\nepochs = %d\nmode = "%s"\n' "$MODEL" "$EPOCHS" "$MODE" >"$TMP/job.toml"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run() {  # binary, log -> prints "samples/s cpu-seconds" (cpu: user + sys of the 3 processes, per 1000 examples)
  local bin=$1 log=$2 port addr c
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  addr=127.0.0.1:$port
  /usr/bin/time -f '%U %S' -o "$log.cpu0" "$bin" node --listen "$addr" --job "$TMP/job.toml" --min-nodes 3 \
    --devices cpu:0 --log-every 1000 >"$log" 2>&1 &
  c=$!
  PIDS+=($c)
  sleep 0.3
  /usr/bin/time -f '%U %S' -o "$log.cpu1" "$bin" node --join "$addr" --devices cpu:0 >"$log.w1" 2>&1 &
  PIDS+=($!)
  /usr/bin/time -f '%U %S' -o "$log.cpu2" "$bin" node --join "$addr" --devices cpu:0 >"$log.w2" 2>&1 &
  PIDS+=($!)
  wait "$c"
  wait
  local sps examples cpu
  sps=$(grep -o '[0-9]* samples/s, ' "$log" | tail -1 | grep -o '^[0-9]*')
  examples=$((60000 * EPOCHS))
  cpu=$(cat "$log".cpu? | awk -v n="$examples" '{ s += $1 + $2 } END { printf "%.4f", s / n * 1000 }')
  echo "$sps $cpu"
}

echo "views overhead: $MODEL $MODE, $EPOCHS epoch(s), $ROUNDS round(s); before $BEFORE, after $AFTER"
: >"$TMP/before"
: >"$TMP/after"
for ((r = 1; r <= ROUNDS; r++)); do
  read -r b bc < <(run "$BEFORE" "$TMP/b$r.log")
  read -r a ac < <(run "$AFTER" "$TMP/a$r.log")
  echo "round $r: before ${b:-?} samples/s ${bc:-?} cpu-s/1k examples, after ${a:-?} samples/s ${ac:-?} cpu-s/1k examples"
  [[ -n "$b" && -n "$a" ]] && echo "$b $a $bc $ac" >>"$TMP/rounds"
done
# Medians of each side, and the median of the per-round ratios (a round's
# two runs share the machine's load of that moment).
awk '{ print $1 }' "$TMP/rounds" | median >"$TMP/mb"
awk '{ print $2 }' "$TMP/rounds" | median >"$TMP/ma"
echo "median samples/s: before $(cat "$TMP/mb"), after $(cat "$TMP/ma"), after/before $(awk -v a="$(cat "$TMP/ma")" -v b="$(cat "$TMP/mb")" 'BEGIN { printf "%.3f", a / b }')"
echo "median of the rounds' after/before: samples/s $(awk '{ print $2 / $1 }' "$TMP/rounds" | median), cpu-seconds per example $(awk '{ print $4 / $3 }' "$TMP/rounds" | median) (below 1: after uses less)"
