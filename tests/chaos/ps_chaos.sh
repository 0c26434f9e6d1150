#!/usr/bin/env bash
# Chaos trials for ps tasks: randomized faults of the parameter
# server's tasks at random moments of a running cluster job, in async,
# ssp:2 and sync. Each trial runs a coordinator and a worker (`troupe node`,
# one CPU device each) and two ps tasks (`troupe node --ps`), the mlp on
# Fashion-MNIST for 2 epochs with a checkpoint every 50 steps, waits until
# the job passed a random step, and does one of:
#
#   kill        kill -9 of a random ps task (async, ssp: the job rolls back
#               to its newest checkpoint; sync: nothing is lost)
#   stop        SIGSTOP of a random ps task (found by the heartbeats; then
#               as kill)
#   term        SIGTERM of a random ps task (its shards move, nothing lost)
#   drain       `troupe ctl drain N` of a random ps task (the same)
#   spare       a third ps task joins (it stands by) and then one of the
#               first two is killed: the spare takes shards
#   both        kill -9 of the worker and of a random ps task together: the
#               coordinator's replica goes on alone, on the ps task left
#
# A trial passes when the coordinator exits 0 within the deadline with the
# job's every step done, its log shows what the fault must cause (a
# rollback, the shards placed anew or moved), every push counted after the
# last restore was applied exactly once, the other processes exit 0 (a ps
# task stopped by SIGTERM: 143), and in sync the replicas are bitwise equal
# at the end. A trial that reaches the deadline is a hang: every process
# is killed and it counts as one. A failed trial whose victim had logged
# the job's end before the fault came is late (chaos_count in lib.sh), not
# failed, and is run again with the next schedule (at most 3 times a mode).
# One line per trial, a summary per mode.
#
#   tests/chaos/ps_chaos.sh build/cli/troupe
#   TROUPE_CHAOS_TRIALS=20        trials per mode (default 20)
#   TROUPE_CHAOS_MODES="async ssp:2 sync"
#   TROUPE_CHAOS_FAULTS="kill stop term drain spare both"
#   TROUPE_CHAOS_SEED=N           the random schedule (default: the time)
#   TROUPE_CHAOS_DEADLINE=240     seconds a trial may take
#   TROUPE_CHAOS_AT=N             every fault at step N of epoch 1 (default:
#                                 a random step from 60 to 250; past the
#                                 job's end, every trial is late)
#   TROUPE_CHAOS_KEEP=1           keep the logs
# Exit status: 0 when every trial passed, 1 otherwise, 2 on bad usage.
set -u

# free_port, coordinator_step, wait_exit, chaos_*
source "$(dirname "$(readlink -f "$0")")/lib.sh"
chaos_binary "${1:-}"
TRIALS=${TROUPE_CHAOS_TRIALS:-20}
MODES=${TROUPE_CHAOS_MODES:-"async ssp:2 sync"}
FAULTS=(${TROUPE_CHAOS_FAULTS:-kill stop term drain spare both})
SEED=${TROUPE_CHAOS_SEED:-$(date +%s)}
DEADLINE=${TROUPE_CHAOS_DEADLINE:-240}
STEPS=1500  # of 2 epochs of 1875 steps: the job ends by its step limit
RANDOM=$SEED

chaos_folder troupe-pschaos

start_ps() {  # log file; LASTPID = the pid
  "$BIN" node --ps --join "$ADDR" --timeout 30 >"$1" 2>&1 &
  LASTPID=$!
}

# The membership's number of the ps task whose log is $1.
ps_index() { sed -nE 's/.*as ps task \(node ([0-9]+)\).*/\1/p' "$1" | head -1; }

declare -A PASS FAIL HANG LATE
echo "ps chaos: $TRIALS trial(s) per mode, modes: $MODES, faults: ${FAULTS[*]}, seed $SEED"
overall=0
for mode in $MODES; do
  PASS[$mode]=0; FAIL[$mode]=0; HANG[$mode]=0
  for ((t = 1; t <= TRIALS; t++)); do
    fault=${FAULTS[$((RANDOM % ${#FAULTS[@]}))]}
    at=$((60 + (RANDOM % 20) * 10))   # step 60..250 of epoch 1 (--log-every 10)
    at=${TROUPE_CHAOS_AT:-$at}
    victim=$((RANDOM % 2))
    dir="$TMP/${mode/:/}-$t"
    [[ -e $dir ]] && dir+="-again-${LATE[$mode]}"
    mkdir -p "$dir/ckpt"
    printf 'model = "mlp"\ndata = "fashion-mnist"\nepochs = 2\nsteps = %d\nbatch = 32\nseed = %d\nmode = "%s"\n' \
      "$STEPS" "$t" "$mode" >"$dir/job.toml"
    printf 'checkpoint_every = 50\ncheckpoint_dir = "%s"\n' "$dir/ckpt" >>"$dir/job.toml"
    free_port port
    ADDR="127.0.0.1:$port"
    free_port port
    CONTROL="127.0.0.1:$port"
    started=$SECONDS
    "$BIN" node --listen "$ADDR" --job "$dir/job.toml" --start-nodes 2 --min-nodes 1 --ps-tasks 2 --devices cpu:0 \
      --log-every 10 --timeout 30 --wait-timeout 60 --control "$CONTROL" >"$dir/coordinator.log" 2>&1 &
    coord=$!
    "$BIN" node --join "$ADDR" --devices cpu:0 --timeout 30 --rejoin-timeout 0 >"$dir/worker.log" 2>&1 &
    worker=$!
    start_ps "$dir/ps0.log"; ps=("$LASTPID")
    start_ps "$dir/ps1.log"; ps+=("$LASTPID")
    PIDS+=("$coord" "$worker" "${ps[@]}")
    extra=""
    why=""
    while kill -0 "$coord" 2>/dev/null && (($(coordinator_step "$dir/coordinator.log") < at)) &&
      ((SECONDS - started < DEADLINE)); do sleep 0.05; done
    target=${ps[$victim]}
    expect_exit=(0 0)
    # What the coordinator must log: a loss in async/ssp rolls back; in sync
    # the shards are only placed anew; a leaving task's shards move.
    lost_line="rolled back to step"
    [[ $mode == sync ]] && lost_line="parameter server placed anew on 1 ps task"
    worker_exit=0
    case $fault in
      kill) kill -9 "$target"; expect_exit[$victim]=-1; want="$lost_line" ;;
      stop) kill -STOP "$target"; expect_exit[$victim]=-1; want="$lost_line" ;;
      term) kill -TERM "$target"; expect_exit[$victim]=143; want="shards moved at step" ;;
      drain)
        index=$(ps_index "$dir/ps$victim.log")
        if ! "$BIN" ctl --at "$CONTROL" drain "$index" >"$dir/ctl.log" 2>&1; then why="ctl drain $index failed: $(cat "$dir/ctl.log")"; fi
        want="shards moved at step"
        ;;
      spare)
        start_ps "$dir/ps2.log"; extra=$LASTPID; PIDS+=("$extra")
        end=$((SECONDS + 60))
        until grep -q "standing by" "$dir/ps2.log" 2>/dev/null || ((SECONDS >= end)) ||
          ! kill -0 "$coord" 2>/dev/null; do sleep 0.05; done
        kill -9 "$target"; expect_exit[$victim]=-1
        want="parameter server placed anew on 2 ps task"
        ;;
      both) kill -9 "$worker" "$target"; worker_exit=-1; expect_exit[$victim]=-1; want="$lost_line" ;;
    esac
    [[ $mode == sync && $fault == drain ]] && want="parameter server placed anew on 1 ps task"
    [[ $mode == sync && $fault == term ]] && want="parameter server placed anew on 1 ps task"
    left=$((DEADLINE - (SECONDS - started)))
    ((left < 5)) && left=5
    wait_exit "$coord" "$left"; rc=$RC
    if [[ $fault == stop ]]; then kill -9 "$target" 2>/dev/null; kill -CONT "$target" 2>/dev/null; fi
    result=pass
    if [[ $rc == 124 ]]; then
      result=hang; why="the coordinator did not end within ${DEADLINE} s"
    elif [[ $rc != 0 ]]; then
      result=fail; why="the coordinator exited $rc: $(grep -E 'failed|error' "$dir/coordinator.log" | tail -1)"
    fi
    if [[ $worker_exit == -1 ]]; then
      wait "$worker" 2>/dev/null
    else
      wait_exit "$worker" 15
      if [[ $result == pass && $RC != 0 ]]; then
        [[ $RC == 124 ]] && result=hang || result=fail
        why="the worker exited $RC"
      fi
    fi
    for i in 0 1; do
      if [[ ${expect_exit[$i]} == -1 ]]; then kill -9 "${ps[$i]}" 2>/dev/null; wait "${ps[$i]}" 2>/dev/null; continue; fi
      wait_exit "${ps[$i]}" 15; wrc=$RC
      if [[ $result == pass && $wrc != "${expect_exit[$i]}" ]]; then
        [[ $wrc == 124 ]] && result=hang || result=fail
        why="ps task $i exited $wrc, not ${expect_exit[$i]}"
      fi
    done
    if [[ -n $extra ]]; then
      wait_exit "$extra" 15
      if [[ $result == pass && $RC != 0 ]]; then
        [[ $RC == 124 ]] && result=hang || result=fail
        why="the spare ps task exited $RC"
      fi
    fi
    out="$dir/coordinator.log"
    counts=$(grep -oE '[0-9]+ synchronous steps, [0-9]+ gradients pushed, [0-9]+ applied' "$out" | tail -1)
    pushed=$(echo "$counts" | awk '{print $4}')
    applied=$(echo "$counts" | awk '{print $7}')
    steps=$(grep -oE '\(([0-9]+) steps' "$out" | tail -1 | tr -dc 0-9)
    if [[ $result == pass && -n $why ]]; then
      result=fail
    elif [[ $result == pass ]] && ! grep -q "$want" "$out"; then
      result=fail; why="no \"$want\" in the coordinator's log"
    elif [[ $result == pass && "${steps:-0}" != "$STEPS" ]]; then
      result=fail; why="the job ended at step ${steps:-?}, not $STEPS"
    elif [[ $result == pass && "$pushed" != "$applied" ]]; then
      result=fail; why="$pushed pushed but $applied applied"
    elif [[ $result == pass && $mode == sync && $fault != both ]] && ! grep -q "replicas agree bitwise" "$out"; then
      result=fail; why="the sync replicas were not found bitwise equal"
    fi
    # A ps task's log says "the job is done" when the coordinator tells it
    # the job is over, and a task killed or stopped writes nothing after
    # the fault: a failed trial whose victim said it had already finished
    # (the script's polling delayed past the job's end) tested nothing.
    if [[ $result == fail ]] && grep -q "the job is done" "$dir/ps$victim.log"; then
      result=late; why="ps task $victim was done before the fault came${why:+; $why}"
    fi
    chaos_count "$mode" "$result"
    back=$(grep -oE 'rolled back to step [0-9]+' "$out" | head -1 | awk '{print $5}')
    acc=$(grep -o 'test accuracy [0-9.]*' "$out" | tail -1 | awk '{print $3}')
    printf '%-6s trial %2d: %-6s ps %d at step %3d: %s (%s%d s, test accuracy %s)%s\n' \
      "$mode" "$t" "$fault" "$victim" "$at" "$result" "${back:+rolled back to $back, }" $((SECONDS - started)) \
      "${acc:-?}" "${why:+: $why}"
    if [[ $result == fail || $result == hang ]]; then
      echo "  --- coordinator log (tail):"; grep -v "step [0-9]*/" "$out" | tail -15 | sed 's/^/  | /'
    fi
    for p in "$coord" "$worker" "${ps[@]}" $extra; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    PIDS=()
    # A late trial is run again with the next schedule, up to 3 times a
    # mode, so that a loaded machine does not leave a mode untested.
    if [[ $result == late ]] && ((${LATE[$mode]} <= 3)); then t=$((t - 1)); fi
  done
done
chaos_summary
exit $overall
