#!/usr/bin/env bash
# The sharded parameter server on one host: samples/s of one
# async job (2 CPU replicas, one process) with 1, 2 and 3 shards, sync for
# reference, and, when BEFORE is given, the single parameter server of a
# build from before shards (e.g. main at bf973ac) to show that ps_shards = 1
# is that server. Configurations are interleaved round by round so that the
# machine's load hits all alike; prints every run's samples/s and CPU time
# (user + sys of the process, which a busy machine disturbs less than the
# wall time), then the medians.
#
#   bench/ps_shards.sh build/cli/troupe [MODEL] [BEFORE/troupe]   (default mlp)
#   ROUNDS=5 EPOCHS=1 bench/ps_shards.sh ...
set -u
AFTER=$(readlink -f "${1:?usage: $0 troupe [MODEL] [BEFORE/troupe]}")
MODEL=${2:-mlp}
BEFORE=${3:+$(readlink -f "$3")}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-ps.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run() {  # name binary args... -> appends samples/s to $TMP/NAME and CPU seconds to $TMP/NAME.cpu
  local name=$1 bin=$2
  shift 2
  /usr/bin/time -f '%U %S' -o "$TMP/$name.time" "$bin" train --model "$MODEL" --epochs "$EPOCHS" --batch 32 --seed 5 --devices cpu:0,cpu:1 --log-every 100000 "$@" \
    >"$TMP/$name.log" 2>&1
  local sps acc cpu
  sps=$(grep -o '[0-9.]* samples/s' "$TMP/$name.log" | tail -1 | grep -o '^[0-9.]*')
  acc=$(grep -o 'test accuracy [0-9.]*' "$TMP/$name.log" | tail -1 | grep -o '[0-9.]*$')
  cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$TMP/$name.time")
  echo "  $name: ${sps:-?} samples/s, ${cpu:-?} CPU s, test accuracy ${acc:-?}"
  [[ -n "$sps" ]] && echo "$sps" >>"$TMP/$name" && echo "$cpu" >>"$TMP/$name.cpu"
}

echo "ps shards: $MODEL, 2 CPU replicas, $EPOCHS epoch(s), $ROUNDS round(s); $AFTER${BEFORE:+, before: $BEFORE}"
configs=(sync async-1 async-2 async-3)
[[ -n "$BEFORE" ]] && configs+=(async-before)
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r"
  run sync "$AFTER" --mode sync
  [[ -n "$BEFORE" ]] && run async-before "$BEFORE" --mode async
  for n in 1 2 3; do run "async-$n" "$AFTER" --mode async --ps-shards "$n"; done
done
echo "medians:"
for c in "${configs[@]}"; do
  [[ -s "$TMP/$c" ]] && printf '  %-13s %8s samples/s  %6s CPU s\n' "$c" "$(median <"$TMP/$c")" "$(median <"$TMP/$c.cpu")"
done
