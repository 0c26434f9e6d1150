#!/usr/bin/env bash
# Parameter-server shards on ps tasks, their speed measured: 2
# workers x 1 CPU device on loopback (a coordinator `troupe node --devices
# cpu:0` and one worker node, `--threads 1` each), Fashion-MNIST, per model,
# in four configurations interleaved round by round:
#
#   sync         the tcp ring's all-reduce (reference)
#   async-coord  async with the single server on the coordinator (no ps
#                tasks: the worker node's replica pushes to it on the data
#                plane, the coordinator's in process; before f972e91 the
#                worker node's pushes went through CAF, its relay)
#   async-1ps    async, --ps-tasks 1 and one `troupe node --ps --join ...`
#   async-2ps    async, --ps-tasks 2 and two ps tasks (the big layers split
#                across both: ps_split_above, default 10000 floats)
#   async-2ps-poll  with POLL_US=N only: async-2ps whose replicas poll for
#                each answer for up to N us before they sleep
#                (TROUPE_PUSH_POLL_US; PushClientConfig::answer_poll)
#   async-2ps-nice  with PS_NICE=N only: async-2ps whose ps tasks run under
#                `nice -n N` (a negative N, which needs root or
#                CAP_SYS_NICE, lets a ps task's thread take a core from a
#                replica as soon as a push arrives)
#
# Per run: the coordinator's samples/s (--summary-json), the replicas'
# "push" spans (async) or "all-reduce" spans (sync) from the --timeline
# traces of the coordinator and the worker node (both replicas pooled;
# median and p99, in ms; a replica's first SKIP steps left out: they
# connect), the staleness mean/max of the summary line, the test accuracy,
# and with ps tasks each task's own median of a push's time on it (reading,
# Adam, answer: "per push on this server" in its log). Per round, bench_ps_push times pushes and plain loopback moves
# of each model's whole gradient (the goal's yardstick: a push round trip
# <= 2x one move). Then the medians over rounds.
#
#   bench/ps_tasks.sh build                     # mlp (8 epochs) and cnn (3), 4 rounds: about 14 min
#   ROUNDS=5 EPOCHS_MLP=2 EPOCHS_CNN=1 BATCH=32 SEED=5 bench/ps_tasks.sh build mlp
#   KEEP=/tmp/dir bench/ps_tasks.sh build       # keep every log and trace there
#   POLL_US=500 bench/ps_tasks.sh build mlp     # and async-2ps with replicas polling for answers
#   PS_NICE=-10 bench/ps_tasks.sh build mlp     # and async-2ps with ps tasks at a higher priority (root)
#   CONFIGS="sync async-2ps" bench/ps_tasks.sh build mlp   # only these configurations
set -u
build=$(readlink -f "${1:?usage: $0 BUILD_DIR [MODEL...]}")
shift
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(mlp cnn)
troupe=$build/cli/troupe
bench_push=$build/bench/bench_ps_push
ROUNDS=${ROUNDS:-4}
BATCH=${BATCH:-64}
EPOCHS_MLP=${EPOCHS_MLP:-8}
EPOCHS_CNN=${EPOCHS_CNN:-3}
SPLIT=${SPLIT:-10000}
SKIP=${SKIP:-5}
SEED=${SEED:-0}
LIMIT=${LIMIT:-300}  # seconds a run may take before it counts as a hang
GRACE=${GRACE:-30}  # seconds the other processes may take to end after the coordinator
for f in "$troupe" "$bench_push"; do [[ -x $f ]] || { echo "$f is missing (cmake --build $1 --target troupe bench_ps_push)" >&2; exit 2; }; done
TMP=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/troupe-pstasks.XXXXXX")}
mkdir -p "$TMP"
[[ -z ${KEEP:-} ]] && trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
read -ra configs <<<"${CONFIGS:-sync async-coord async-1ps async-2ps}"
POLL_US=${POLL_US:-}
[[ -n $POLL_US ]] && configs+=(async-2ps-poll)
PS_NICE=${PS_NICE:-}
[[ -n $PS_NICE ]] && configs+=(async-2ps-nice)
for c in "${configs[@]}"; do
  case $c in
    sync | async-coord | async-1ps | async-2ps | async-2ps-poll | async-2ps-nice) ;;
    *) echo "unknown configuration '$c' in CONFIGS (sync, async-coord, async-1ps, async-2ps; POLL_US and PS_NICE add the others)" >&2; exit 2 ;;
  esac
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Any python3 will do (the standard library only): PYTHON, else the one on PATH.
python=${PYTHON:-python3}
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Median and p99 (ms) of the spans named $1 in the traces $2..., steps > SKIP.
spans() {
  "$python" - "$SKIP" "$@" <<'PY'
import json, sys
skip, name, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
d = []
for path in files:
    try:
        trace = json.load(open(path))
    except (OSError, ValueError):
        continue
    d += [e["dur"] / 1000.0 for e in trace["traceEvents"]
          if e.get("ph") == "X" and e.get("name") == name and e["args"]["step"] > skip]
d.sort()
if not d:
    print("- - 0")
else:
    med = d[len(d) // 2] if len(d) % 2 else (d[len(d) // 2 - 1] + d[len(d) // 2]) / 2
    p99 = d[min(len(d) - 1, int(0.99 * len(d)))]
    print(f"{med:.3f} {p99:.3f} {len(d)}")
PY
}

# run MODEL CONFIG ROUND: one cluster; appends "sps push_med push_p99 stale_mean stale_max acc" to $TMP/MODEL.CONFIG
run() {
  local model=$1 config=$2 round=$3 mode=async nps=0 epochs poll=0 ps_nice=0
  case $config in
    sync) mode=sync ;;
    async-1ps) nps=1 ;;
    async-2ps) nps=2 ;;
    async-2ps-poll) nps=2 poll=$POLL_US ;;
    async-2ps-nice) nps=2 ps_nice=$PS_NICE ;;
  esac
  [[ $model == mlp ]] && epochs=$EPOCHS_MLP || epochs=$EPOCHS_CNN
  local dir=$TMP/$model-$config-$round
  mkdir -p "$dir"
  cat >"$dir/job.toml" <<JOB
model = "$model"
data = "fashion-mnist"
epochs = $epochs
batch = $BATCH
lr = 1e-3
seed = $SEED
mode = "$mode"
ps_split_above = $SPLIT
[optimizer]
name = "adam"
JOB
  local port pids=() k rc
  port=$(free_port)
  local extra=()
  ((nps > 0)) && extra=(--ps-tasks "$nps")
  timeout -k 5 "$LIMIT" env TROUPE_PUSH_POLL_US="$poll" "$troupe" node --listen "127.0.0.1:$port" --job "$dir/job.toml" --min-nodes 2 --devices cpu:0 \
    --threads 1 --log-every 0 --wait-timeout 120 --summary-json "$dir/summary.json" \
    --timeline "$dir/coordinator.json" --timeline-steps 1:100000000 "${extra[@]}" >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  timeout -k 5 "$LIMIT" env TROUPE_PUSH_POLL_US="$poll" "$troupe" node --join "127.0.0.1:$port" --devices cpu:0 --threads 1 \
    --timeline "$dir/worker.json" --timeline-steps 1:100000000 >"$dir/worker.log" 2>&1 &
  pids+=($!)
  for ((k = 0; k < nps; k++)); do
    timeout -k 5 "$LIMIT" nice -n "$ps_nice" "$troupe" node --ps --join "127.0.0.1:$port" >"$dir/ps$k.log" 2>&1 &
    pids+=($!)
  done
  wait $coordinator
  rc=$?
  local bad="" note="" names=(worker) t child killed=()
  for ((k = 0; k < nps; k++)); do names+=("ps$k"); done
  ((rc != 0)) && bad="coordinator exit $rc"
  # The others end when the coordinator does; one still running GRACE s
  # later is hung: its stacks go to DIR/hang-NAME.txt (with gdb), then it is
  # stopped (TERM through timeout, KILL 5 s later).
  for ((t = 0; t < GRACE * 10; t++)); do
    for k in "${pids[@]}"; do kill -0 "$k" 2>/dev/null && { sleep 0.1; continue 2; }; done
    break
  done 2>/dev/null
  for k in "${!pids[@]}"; do
    if kill -0 "${pids[$k]}" 2>/dev/null; then
      child=$(pgrep -P "${pids[$k]}" | head -1)
      note="$note; ${names[$k]} (pid ${child:-?}) still running ${GRACE} s after the coordinator ended: killed"
      if [[ -n $child ]] && command -v gdb >/dev/null; then
        timeout 60 gdb -p "$child" -batch -ex 'thread apply all bt 20' >"$dir/hang-${names[$k]}.txt" 2>&1
      fi
      kill -TERM "${pids[$k]}" 2>/dev/null
      killed[$k]=1
    fi
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || [[ -n ${killed[$k]:-} ]] || bad="$bad; ${names[$k]} exited $?"; done
  local sps acc stale_mean stale_max span
  sps=$(sed -n 's/.*"samples_per_s": *\([0-9.]*\).*/\1/p' "$dir/summary.json" 2>/dev/null | head -1)
  acc=$(grep -o 'test accuracy [0-9.]*' "$dir/coordinator.log" | tail -1 | grep -o '[0-9.]*$')
  stale_mean=$(sed -n 's/.*staleness mean \([0-9.]*\), max \([0-9]*\).*/\1/p' "$dir/coordinator.log" | tail -1)
  stale_max=$(sed -n 's/.*staleness mean \([0-9.]*\), max \([0-9]*\).*/\2/p' "$dir/coordinator.log" | tail -1)
  [[ $mode == sync ]] && span=all-reduce || span=push
  read -r med p99 n < <(spans "$span" "$dir/coordinator.json" "$dir/worker.json")
  read -r cmed _ _ < <(spans "$span" "$dir/coordinator.json")
  read -r wmed _ _ < <(spans "$span" "$dir/worker.json")
  local modes
  modes=$(grep -o 'modes: .*' "$dir/coordinator.log" | tail -1)
  printf '  %-4s %-12s %9.0f samples/s  %-10s median %7s ms  p99 %7s ms (%s spans; median: coordinator replica %s, worker replica %s)  staleness %s/%s  accuracy %s%s\n' \
    "$model" "$config" "${sps:-0}" "$span" "$med" "$p99" "$n" "$cmed" "$wmed" "${stale_mean:--}" "${stale_max:--}" "${acc:-?}" \
    "${bad:+  FAILED: $bad (logs in $dir)}${note:+  NOTE${note#;} (logs in $dir)}"
  [[ -n $modes ]] && echo "       $modes"
  # Each ps task's own account of a push (PushServer::service_times): what
  # of the replicas' round trip is the server's reading, Adam and answer.
  local svc server=-
  for ((k = 0; k < nps; k++)); do
    svc=$(grep -o 'per push on this server: .*pushes)' "$dir/ps$k.log" 2>/dev/null | tail -1)
    [[ -n $svc ]] && echo "       ps$k: ${svc#per push on this server: }"
  done
  if ((nps > 0)); then
    server=$(grep -ho 'all [0-9.]* ms, p99' "$dir"/ps*.log 2>/dev/null | awk '{ s += $2; n++ } END { if (n) printf "%.3f", s / n; else print "-" }')
  fi
  if [[ -z $bad && -n $sps ]]; then
    echo "$sps $med $p99 ${stale_mean:--} ${stale_max:--} ${acc:-?} $cmed $wmed $server" >>"$TMP/$model.$config"
  else
    echo "--- coordinator log tail ($dir):"; tail -5 "$dir/coordinator.log"
  fi
}

# The gradient sizes (floats): the mlp's is known; others from `troupe train --steps 1`.
declare -A floats
floats[mlp]=235146
for m in "${models[@]}"; do
  [[ -n ${floats[$m]:-} ]] && continue
  n=$("$troupe" train --model "$m" --steps 1 --batch 8 --devices cpu:0 --log-every 0 2>&1 | sed -n 's/.*parameters: \([0-9]*\).*/\1/p' | head -1)
  floats[$m]=${n:?could not find the $m parameter count}
done
sizes=""
for m in "${models[@]}"; do sizes+="${sizes:+,}$(awk -v n="${floats[$m]}" 'BEGIN { printf "%.6f", n * 4 / 1e6 }')"; done

echo "ps tasks: ${models[*]}, 2 workers x 1 CPU device (+ 0/1/2 ps tasks) on loopback, batch $BATCH, epochs mlp $EPOCHS_MLP / cnn $EPOCHS_CNN," \
  "adam 1e-3, ps_split_above $SPLIT, $ROUNDS round(s); $troupe; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
for m in "${models[@]}"; do echo "  $m gradient: ${floats[$m]} floats"; done
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$bench_push" --sizes-mb "$sizes" --reps 50 --warmup 5 | grep '^RESULT' | tee -a "$TMP/push.results" | sed 's/^/  /'
  [[ -n $POLL_US ]] && "$bench_push" --sizes-mb "$sizes" --reps 50 --warmup 5 --poll-us "$POLL_US" | grep '^RESULT' |
    sed "s/^/  polling $POLL_US us: /"
  for m in "${models[@]}"; do
    for c in "${configs[@]}"; do run "$m" "$c" "$r"; done
  done
done

echo "medians over rounds:"
i=0
for m in "${models[@]}"; do
  i=$((i + 1))
  # bench_ps_push's line for this model: the i-th size of every round.
  move=$(grep -o 'move_median_ms=[0-9.]*' "$TMP/push.results" | awk -v i="$i" -v s="${#models[@]}" '(NR - 1) % s == i - 1' | cut -d= -f2 | median)
  bpush=$(grep -o 'push_median_ms=[0-9.]*' "$TMP/push.results" | awk -v i="$i" -v s="${#models[@]}" '(NR - 1) % s == i - 1' | cut -d= -f2 | median)
  echo "  $m (${floats[$m]} floats): one move over loopback $move ms, a bare push round trip (bench_ps_push) $bpush ms; goal: push round trip <= $(awk -v m="$move" 'BEGIN { printf "%.3f", 2 * m }') ms"
  printf '    %-14s %10s %10s %10s %8s %8s %9s %5s  %-36s %s\n' config samples/s span_med span_p99 st_mean st_max accuracy runs \
    "span_med coordinator/worker replica" "server's part (ps tasks' own median)"
  for c in "${configs[@]}"; do
    f=$TMP/$m.$c
    [[ -s $f ]] || { printf '    %-14s no successful run\n' "$c"; continue; }
    col() { awk -v k="$1" '$k != "-" { print $k }' "$f" | median; }
    printf '    %-14s %10.0f %10s %10s %8s %8s %9s %5s  %-36s %s\n' "$c" "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)" "$(col 6)" \
      "$(wc -l <"$f")" "$(col 7) / $(col 8)" "$(col 9)"
  done
  if [[ -s $TMP/$m.sync && -s $TMP/$m.async-2ps ]]; then
    s=$(awk '{ print $1 }' "$TMP/$m.sync" | median)
    a=$(awk '{ print $1 }' "$TMP/$m.async-2ps" | median)
    p=$(awk '{ print $2 }' "$TMP/$m.async-2ps" | median)
    echo "    async-2ps / sync samples/s (ratio of medians): $(awk -v a="$a" -v s="$s" 'BEGIN { printf "%.2f", a / s }');" \
      "async-2ps push median / one move: $(awk -v p="$p" -v m="$move" 'BEGIN { printf "%.2f", p / m }')"
  fi
  for c in async-2ps-poll async-2ps-nice; do
    [[ -s $TMP/$m.sync && -s $TMP/$m.$c ]] || continue
    s=$(awk '{ print $1 }' "$TMP/$m.sync" | median)
    a=$(awk '{ print $1 }' "$TMP/$m.$c" | median)
    p=$(awk '{ print $2 }' "$TMP/$m.$c" | median)
    echo "    $c / sync samples/s: $(awk -v a="$a" -v s="$s" 'BEGIN { printf "%.2f", a / s }');" \
      "$c push median / one move: $(awk -v p="$p" -v m="$move" 'BEGIN { printf "%.2f", p / m }')"
  done
done
