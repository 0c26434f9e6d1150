#!/usr/bin/env bash
# Fault trials for `troupe node` in async mode (processes that do not
# end): a coordinator and two workers, each one CPU device, on loopback
# (or, as root, in network namespaces), and two faults, each repeated:
#
#   coordinator-kill  kill -9 of the coordinator while it trains; the job
#                     ends at the kill.
#   partition         worker 2 cut off while training: its veth link taken
#                     down when running as root with `ip netns` (a real
#                     partition; the link comes back after the coordinator
#                     has exited), else SIGSTOP of worker 2 as the stand-in
#                     (SIGCONT once the coordinator has exited). The job
#                     ends when the coordinator exits (after its checkpoint).
#
# Each trial asserts that no process of the trial is alive 5 s after the
# job's end, and prints, per process, how long after the job's end it exited.
# Exit status: 0 when every trial left nothing behind, 1 otherwise (2: bad
# usage or setup).
#
#   tests/faults/node_faults.sh build/cli/troupe
#   TROUPE_FAULT_REPEATS=10   trials per case (default 10)
#   TROUPE_FAULT_CASES="coordinator-kill partition"
#   TROUPE_FAULT_PARTITION=auto|netns|sigstop   (default auto: netns when root and it works)
#   TROUPE_FAULT_KEEP=1       keep the temporary folder (logs)
#   TROUPE_FAULT_STACKS=1     print the threads of a leftover process (gdb)
set -u

BIN=${1:-}
if [[ -z "$BIN" || ! -x "$BIN" ]]; then
  echo "usage: $0 PATH/TO/troupe" >&2
  exit 2
fi
BIN=$(readlink -f "$BIN")
REPEATS=${TROUPE_FAULT_REPEATS:-10}
CASES=${TROUPE_FAULT_CASES:-"coordinator-kill partition"}
PARTITION=${TROUPE_FAULT_PARTITION:-auto}
GRACE=5            # seconds after the job's end by which everything must be gone
TRAIN_WAIT=120     # seconds to wait for training to start

TMP=$(mktemp -d "${TMPDIR:-/tmp}/troupe-faults.XXXXXX")
NS=()              # network namespaces this script made
BRIDGE=""
PIDS=()            # processes this script started

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  for p in "${NS[@]}"; do ip netns del "$p" 2>/dev/null; done
  [[ -n "$BRIDGE" ]] && ip link del "$BRIDGE" 2>/dev/null
  if [[ "${TROUPE_FAULT_KEEP:-0}" == 1 ]]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 2' INT TERM

# A loopback port nobody listens on (the gate binds it a moment later),
# below the kernel's ephemeral range: free_port of the chaos scripts
# (tests/chaos/lib.sh, which says why).
source "$(dirname "$(readlink -f "$0")")/../chaos/lib.sh"

# The secret file doubles as a marker: every process of this script has
# $TMP in its command line, so `pgrep -f $TMP` finds exactly ours.
printf 'faults %s\n' "$RANDOM$RANDOM" > "$TMP/secret"
cat > "$TMP/job.toml" <<JOB
model = "mlp"
data = "fashion-mnist"
seed = 5
epochs = 50
batch = 32
mode = "async"
checkpoint_dir = "$TMP/ckpt"
JOB

alive() { pgrep -f -- "$TMP" || true; }

# Network namespaces: three, joined by veth links to a bridge.
setup_netns() {
  [[ $(id -u) == 0 ]] || return 1
  command -v ip > /dev/null || return 1
  local tag=$(( $$ % 10000 )) i n v
  BRIDGE="trfb$tag"
  ip link add "$BRIDGE" type bridge 2>/dev/null && ip link set "$BRIDGE" up || { BRIDGE=""; return 1; }
  for i in 0 1 2; do
    n="trf$tag-$i"; v="trfv$tag$i"
    ip netns add "$n" || return 1
    NS+=("$n")
    ip link add "$v" type veth peer name eth0 netns "$n" &&
      ip link set "$v" master "$BRIDGE" up &&
      ip -n "$n" addr add "10.232.$((tag % 250)).$((i + 1))/24" dev eth0 &&
      ip -n "$n" link set eth0 up && ip -n "$n" link set lo up || return 1
  done
  SUBNET="10.232.$((tag % 250))"
  return 0
}

MODE_PARTITION=sigstop
if [[ " $CASES " == *" partition "* && "$PARTITION" != sigstop ]]; then
  if setup_netns; then
    MODE_PARTITION=netns
  elif [[ "$PARTITION" == netns ]]; then
    echo "cannot create network namespaces here" >&2
    exit 2
  else
    for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; done
    NS=()
    [[ -n "$BRIDGE" ]] && ip link del "$BRIDGE" 2>/dev/null
    BRIDGE=""
  fi
fi

# start NAME NETNS ARGS...: runs troupe (in NETNS unless empty) with its
# output in $TRIAL/NAME.log; sets LAST_PID.
start() {
  local name=$1 ns=$2
  shift 2
  if [[ -n "$ns" ]]; then
    ip netns exec "$ns" "$BIN" "$@" > "$TRIAL/$name.log" 2>&1 &
  else
    "$BIN" "$@" > "$TRIAL/$name.log" 2>&1 &
  fi
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_for_line FILE REGEX SECONDS
wait_for_line() {
  local deadline=$(( $(date +%s) + $3 ))
  while (( $(date +%s) < deadline )); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# wait_exit PID SECONDS: 0 once PID is gone.
wait_exit() {
  local deadline
  deadline=$(awk -v n="$(now)" -v s="$2" 'BEGIN { printf "%.3f", n + s }')
  while kill -0 "$1" 2>/dev/null; do
    # a zombie of ours counts as gone
    [[ $(ps -o stat= -p "$1" 2>/dev/null) == Z* ]] && return 0
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep 0.05
  done
  return 0
}

TRIALS=0
LEFTOVERS=0
WORST=0
FAILED_TRIALS=()

# run_trial CASE N
run_trial() {
  local kind=$1 n=$2 port addr ns0="" ns1="" ns2="" c w1 w2 end t p leftover=0 line
  TRIAL="$TMP/$kind-$n"
  mkdir -p "$TRIAL"
  rm -rf "$TMP/ckpt"
  free_port port
  addr="127.0.0.1:$port"
  if [[ "$kind" == partition && "$MODE_PARTITION" == netns ]]; then
    ns0=${NS[0]}; ns1=${NS[1]}; ns2=${NS[2]}
    addr="$SUBNET.1:$port"
  fi
  local common=(--devices cpu:0 --secret-file "$TMP/secret")
  start coordinator "$ns0" node --listen "$addr" --job "$TMP/job.toml" --min-nodes 3 --wait-timeout 10 --log-every 20 "${common[@]}"
  c=$LAST_PID
  # --rejoin-timeout 0: the fault cases look at how processes end after
  # the job fails; rejoining a restarted coordinator is tested on its own.
  start worker1 "$ns1" node --join "$addr" --rejoin-timeout 0 "${common[@]}"
  w1=$LAST_PID
  start worker2 "$ns2" node --join "$addr" --rejoin-timeout 0 "${common[@]}"
  w2=$LAST_PID
  if ! wait_for_line "$TRIAL/coordinator.log" "epoch (1 step ([4-9][0-9]|[1-9][0-9]{2,})/|[2-9])" "$TRAIN_WAIT"; then
    echo "  $kind #$n: training did not start within ${TRAIN_WAIT}s (setup problem); logs:" >&2
    tail -n 5 "$TRIAL"/*.log >&2
    for p in $c $w1 $w2; do kill -9 "$p" 2>/dev/null; done
    return 2
  fi
  local victim_veth="" fault
  fault=$(now)
  case "$kind" in
    coordinator-kill)
      kill -9 "$c"
      end=$(now)
      ;;
    partition)
      if [[ "$MODE_PARTITION" == netns ]]; then
        victim_veth="trfv$(( $$ % 10000 ))2"
        ip link set "$victim_veth" down
      else
        kill -STOP "$w2"
      fi
      # The job ends when the coordinator exits: the worker is removed at the
      # heartbeat timeout, the two nodes left are below --min-nodes 3, and
      # after --wait-timeout 10 s the coordinator checkpoints and stops.
      if ! wait_exit "$c" 60; then
        echo "  $kind #$n: the coordinator did not exit within 60 s of the partition" >&2
      fi
      end=$(now)
      if [[ "$MODE_PARTITION" == netns ]]; then ip link set "$victim_veth" up; else kill -CONT "$w2"; fi
      ;;
  esac
  line="  $kind #$n:"
  [[ "$kind" == partition ]] && line+=" job ended $(elapsed "$fault" "$end")s after the cut;"
  for p in $c $w1 $w2; do
    local who=coordinator
    [[ $p == "$w1" ]] && who=worker1
    [[ $p == "$w2" ]] && who=worker2
    if wait_exit "$p" "$(awk -v e="$end" -v n="$(now)" -v g="$GRACE" 'BEGIN { r = e + g - n; printf "%.3f", (r > 0 ? r : 0) }')"; then
      t=$(elapsed "$end" "$(now)")
      wait "$p" 2>/dev/null
      line+=" $who exited $? after ${t}s;"
      awk -v t="$t" -v w="$WORST" 'BEGIN { exit !(t > w) }' && WORST=$t
    else
      line+=" $who STILL ALIVE after ${GRACE}s;"
      leftover=1
    fi
  done
  # The worker's exit backstop ends a worker whose actors did not stop; the
  # trial is to show that they stop by themselves.
  if grep -qF "did not stop within" "$TRIAL"/*.log; then
    leftover=1
    line+=" the exit backstop fired;"
  fi
  # Anything else of ours (a child of ip netns exec, say).
  sleep 0.1
  local rest
  rest=$(alive)
  if [[ -n "$rest" ]]; then
    leftover=1
    line+=" leftover pids: $(echo $rest)"
  fi
  echo "$line"
  TRIALS=$((TRIALS + 1))
  if (( leftover )); then
    LEFTOVERS=$((LEFTOVERS + 1))
    FAILED_TRIALS+=("$kind #$n")
    for p in $(alive); do
      echo "    $(ps -o pid=,stat=,args= -p "$p" 2>/dev/null | cut -c1-160)"
      if [[ "${TROUPE_FAULT_STACKS:-0}" == 1 ]] && command -v gdb > /dev/null; then
        timeout 60 gdb -p "$p" -batch -ex "thread apply all bt 16" 2>/dev/null |
          grep -E "^#|^Thread" | grep -vE "futex|pthread_cond|clone3|start_thread|libstdc" | cut -c1-160 | sed 's/^/      /'
      fi
    done
    for f in "$TRIAL"/worker*.log; do echo "    --- $(basename "$f"):"; tail -n 4 "$f" | sed 's/^/    /'; done
    for p in $(alive); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  fi
  return 0
}

echo "troupe fault trials: $BIN, $REPEATS per case, cases: $CASES"
if [[ " $CASES " == *" partition "* ]]; then
  if [[ "$MODE_PARTITION" == netns ]]; then
    echo "partition: a real one (network namespaces, the worker's veth link down)"
  else
    echo "partition: SIGSTOP of the worker as the stand-in (TROUPE_FAULT_PARTITION=sigstop, or no network namespaces here)"
  fi
fi
for kind in $CASES; do
  for n in $(seq "$REPEATS"); do
    run_trial "$kind" "$n"
    rc=$?
    if (( rc == 2 )); then exit 2; fi
  done
done
echo "trials $TRIALS, with leftovers $LEFTOVERS, latest exit after the job's end ${WORST}s (partition by $MODE_PARTITION)"
if (( LEFTOVERS )); then
  echo "FAILED: processes alive ${GRACE}s after the job's end in: ${FAILED_TRIALS[*]}"
  exit 1
fi
exit 0
