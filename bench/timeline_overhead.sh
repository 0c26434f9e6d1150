#!/usr/bin/env bash
# What --timeline costs (the goal: < 3% samples/s). The same job, `troupe
# train` on two CPU devices, with and without --timeline recording every
# step (--timeline-steps 1:N, so each step of the run is recorded), rounds
# interleaved so that the machine's load hits both alike. Prints each run's
# samples/s and the medians with their ratio.
#
#   bench/timeline_overhead.sh build/cli/troupe [MODEL] [MODE]   (default mlp sync)
#   ROUNDS=7 STEPS=1500 bench/timeline_overhead.sh build/cli/troupe
set -u
BIN=$(readlink -f "${1:?usage: $0 PATH/TO/troupe [MODEL] [MODE]}")
MODEL=${2:-mlp}
MODE=${3:-sync}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-1500}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-timeline.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
run() {  # extra args -> samples/s
  "$BIN" train --model "$MODEL" --mode "$MODE" --devices cpu:0,cpu:1 --batch 32 --epochs 1 --steps "$STEPS" \
    --seed 5 --log-every 0 "$@" >"$TMP/log" 2>&1 || { echo "the run failed:" >&2; tail -5 "$TMP/log" >&2; exit 1; }
  grep -o '[0-9]* samples/s' "$TMP/log" | tail -1 | grep -o '^[0-9]*'
}
echo "timeline overhead: $MODEL $MODE, 2 x cpu, $STEPS steps, $ROUNDS rounds (without, with --timeline-steps 1:$STEPS)"
for ((r = 1; r <= ROUNDS; r++)); do
  off=$(run)
  on=$(run --timeline "$TMP/t.json" --timeline-steps "1:$STEPS")
  events=$(python3 -c "import json,sys; print(sum(e['ph']=='X' for e in json.load(open(sys.argv[1]))['traceEvents']))" "$TMP/t.json")
  echo "round $r: without $off, with $on samples/s ($events spans, $(du -k "$TMP/t.json" | cut -f1) KiB)"
  echo "$off" >>"$TMP/off"
  echo "$on" >>"$TMP/on"
  echo "$off $on" >>"$TMP/rounds"
done
m_off=$(median <"$TMP/off")
m_on=$(median <"$TMP/on")
awk -v a="$m_off" -v b="$m_on" 'BEGIN { printf "median: without %d, with %d samples/s; ratio %.3f (overhead %.1f%%)\n", a, b, b / a, 100 * (1 - b / a) }'
echo "median of the rounds' with/without: $(awk '{ print $2 / $1 }' "$TMP/rounds" | median)"
