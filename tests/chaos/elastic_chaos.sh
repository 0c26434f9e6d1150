#!/usr/bin/env bash
# Chaos trials for elastic membership: randomized faults at random
# moments of a running cluster job, in sync, async and ssp:2. Each trial runs
# a coordinator and two workers (`troupe node`, one CPU device each, the mlp
# on Fashion-MNIST, two epochs) on loopback, waits until the job passed a
# random step, and does one of:
#
#   kill        kill -9 of a random worker
#   stop        SIGSTOP of a random worker (found by the heartbeats)
#   term        SIGTERM of a random worker (it drains: leaves at a boundary)
#   drain       `troupe ctl drain N` of a random worker
#   join        a third worker joins the running job
#   join-leave  a third worker joins, then leaves (SIGTERM) once it trains
#   join-kill   a third worker joins and, as the coordinator admits it (the
#               view that takes it in is forming), a random worker of the
#               first two is killed: the view forms again without it, and
#               the other two train on
#   start-kill  as the job starts (the first view is forming), a random
#               worker is killed: the job starts without it (as view 1) or,
#               when the kill lands after the first view formed, goes on
#               without it (a view change)
#
# A trial passes when the coordinator exits 0 within the deadline, its log
# shows the expected view change ("view 1 at step ..."), the surviving
# workers exit 0 (a worker that left on SIGTERM: 143), and in sync the
# coordinator found the replicas bitwise equal at the end. A trial that
# reaches the deadline is a hang: every process is killed and it counts as
# one. Prints one line per trial and a summary per mode.
#
#   tests/chaos/elastic_chaos.sh build/cli/troupe
#   TROUPE_CHAOS_TRIALS=20        trials per mode (default 20)
#   TROUPE_CHAOS_MODES="sync async ssp:2"
#   TROUPE_CHAOS_FAULTS="kill stop term drain join join-leave join-kill start-kill"
#   TROUPE_CHAOS_SEED=N           the random schedule (default: the time)
#   TROUPE_CHAOS_DEADLINE=240     seconds a trial may take
#   TROUPE_CHAOS_KEEP=1           keep the logs
# Exit status: 0 when every trial passed, 1 otherwise, 2 on bad usage.
set -u

# free_port, coordinator_step, wait_exit, chaos_*
source "$(dirname "$(readlink -f "$0")")/lib.sh"
chaos_binary "${1:-}"
TRIALS=${TROUPE_CHAOS_TRIALS:-20}
MODES=${TROUPE_CHAOS_MODES:-"sync async ssp:2"}
FAULTS=(${TROUPE_CHAOS_FAULTS:-kill stop term drain join join-leave join-kill start-kill})
SEED=${TROUPE_CHAOS_SEED:-$(date +%s)}
DEADLINE=${TROUPE_CHAOS_DEADLINE:-240}
RANDOM=$SEED

chaos_folder troupe-chaos

start_worker() {  # log file; LASTPID = the pid
  "$BIN" node --join "$ADDR" --devices cpu:0 --timeout 30 --rejoin-timeout 0 >"$1" 2>&1 &
  LASTPID=$!
}

declare -A PASS FAIL HANG LATE
echo "elastic chaos: $TRIALS trial(s) per mode, modes: $MODES, faults: ${FAULTS[*]}, seed $SEED"
overall=0
for mode in $MODES; do
  PASS[$mode]=0; FAIL[$mode]=0; HANG[$mode]=0
  for ((t = 1; t <= TRIALS; t++)); do
    fault=${FAULTS[$((RANDOM % ${#FAULTS[@]}))]}
    at=$((20 + (RANDOM % 24) * 10))   # step 20..250 of epoch 1 (--log-every 10)
    victim=$((RANDOM % 2))
    dir="$TMP/${mode/:/}-$t"
    mkdir -p "$dir"
    printf 'model = "mlp"\ndata = "fashion-mnist"\nepochs = 2\nbatch = 32\nseed = %d\nmode = "%s"\n' "$t" "$mode" >"$dir/job.toml"
    free_port port
    ADDR="127.0.0.1:$port"
    free_port port
    CONTROL="127.0.0.1:$port"
    started=$SECONDS
    "$BIN" node --listen "$ADDR" --job "$dir/job.toml" --start-nodes 3 --min-nodes 1 --devices cpu:0 \
      --log-every 10 --timeout 30 --wait-timeout 60 --control "$CONTROL" >"$dir/coordinator.log" 2>&1 &
    coord=$!
    start_worker "$dir/worker0.log"; w=("$LASTPID")
    start_worker "$dir/worker1.log"; w+=("$LASTPID")
    PIDS+=("$coord" "${w[@]}")
    extra=""
    why=""
    # Wait for the moment (or the end of the job, or the deadline); for
    # start-kill, the coordinator's "starting with 3 node(s)".
    if [[ $fault == start-kill ]]; then
      at=0
      until grep -q "starting with 3 node" "$dir/coordinator.log" 2>/dev/null || ((SECONDS - started >= DEADLINE)) ||
        ! kill -0 "$coord" 2>/dev/null; do sleep 0.005; done
      sleep 0.0$((RANDOM % 10))
    fi
    while kill -0 "$coord" 2>/dev/null && (($(coordinator_step "$dir/coordinator.log") < at)) &&
      ((SECONDS - started < DEADLINE)); do sleep 0.05; done
    target=${w[$victim]}
    expect_exit=(0 0)
    case $fault in
      kill) kill -9 "$target"; expect_exit[$victim]=-1 ;;
      stop) kill -STOP "$target"; expect_exit[$victim]=-1 ;;
      term) kill -TERM "$target"; expect_exit[$victim]=143 ;;
      drain)
        index=$(grep -E "node [0-9]+ joined: .*pid $target\$" "$dir/coordinator.log" | sed -E 's/.*node ([0-9]+) joined.*/\1/' | head -1)
        if ! "$BIN" ctl --at "$CONTROL" drain "$index" >"$dir/ctl.log" 2>&1; then why="ctl drain $index failed: $(cat "$dir/ctl.log")"; fi
        ;;
      join) start_worker "$dir/worker2.log"; extra=$LASTPID; PIDS+=("$extra") ;;
      join-leave)
        start_worker "$dir/worker2.log"; extra=$LASTPID; PIDS+=("$extra")
        end=$((SECONDS + 60))
        until grep -q "view [0-9]*: replicas" "$dir/worker2.log" 2>/dev/null || ((SECONDS >= end)) ||
          ! kill -0 "$coord" 2>/dev/null; do sleep 0.05; done
        sleep 0.$((RANDOM % 10))
        kill -TERM "$extra" 2>/dev/null
        ;;
      start-kill) kill -9 "$target"; expect_exit[$victim]=-1 ;;
      join-kill)
        # The coordinator says the newcomer joins at the next step
        # boundary, a few ms before it sends the view: the kill lands
        # before, while or after the view forms.
        start_worker "$dir/worker2.log"; extra=$LASTPID; PIDS+=("$extra")
        end=$((SECONDS + 60))
        until grep -q "joins at the next step boundary" "$dir/coordinator.log" || ((SECONDS >= end)) ||
          ! kill -0 "$coord" 2>/dev/null; do sleep 0.005; done
        sleep 0.00$((RANDOM % 10))
        kill -9 "$target"; expect_exit[$victim]=-1
        ;;
    esac
    left=$((DEADLINE - (SECONDS - started)))
    ((left < 5)) && left=5
    wait_exit "$coord" "$left"; rc=$RC
    # The stopped worker is killed once the job is over (SIGSTOP stand-in).
    if [[ $fault == stop ]]; then kill -9 "$target" 2>/dev/null; kill -CONT "$target" 2>/dev/null; fi
    result=pass
    if [[ $rc == 124 ]]; then
      result=hang; why="the coordinator did not end within ${DEADLINE} s"
    elif [[ $rc != 0 ]]; then
      result=fail; why="the coordinator exited $rc: $(grep -E 'failed|error' "$dir/coordinator.log" | tail -1)"
    fi
    for i in 0 1; do
      if [[ ${expect_exit[$i]} == -1 ]]; then kill -9 "${w[$i]}" 2>/dev/null; wait "${w[$i]}" 2>/dev/null; continue; fi
      wait_exit "${w[$i]}" 15; wrc=$RC
      if [[ $result == pass && $wrc != "${expect_exit[$i]}" ]]; then
        [[ $wrc == 124 ]] && result=hang || result=fail
        why="worker $i exited $wrc, not ${expect_exit[$i]}"
      fi
    done
    if [[ -n $extra ]]; then
      want=0; [[ $fault == join-leave ]] && want=143
      wait_exit "$extra" 15; wrc=$RC
      if [[ $result == pass && $wrc != "$want" ]]; then
        [[ $wrc == 124 ]] && result=hang || result=fail
        why="the joining worker exited $wrc, not $want"
      fi
    fi
    views=$(grep -c "coordinator: view " "$dir/coordinator.log")
    # Every fault changes the membership: one view change (join-leave: two;
    # start-kill: none when the first view did not form and the job started
    # without the killed worker).
    want_views=1; [[ $fault == join-leave ]] && want_views=2
    [[ $fault == start-kill ]] && grep -q "starting again, as view" "$dir/coordinator.log" && want_views=0
    if [[ $result == pass && -n $why ]]; then
      result=fail
    elif [[ $result == pass ]] && ((views < want_views)); then
      result=fail; why="$views view change(s), $want_views expected"
    elif [[ $result == pass && $mode == sync ]] && ! grep -q "replicas agree bitwise" "$dir/coordinator.log"; then
      result=fail; why="the sync replicas were not found bitwise equal"
    fi
    chaos_count "$mode" "$result"
    acc=$(grep -o 'test accuracy [0-9.]*' "$dir/coordinator.log" | tail -1 | awk '{print $3}')
    printf '%-6s trial %2d: %-10s at step %3d: %s (%d view change(s), %d s, test accuracy %s)%s\n' \
      "$mode" "$t" "$fault" "$at" "$result" "$views" $((SECONDS - started)) "${acc:-?}" "${why:+: $why}"
    if [[ $result != pass ]]; then
      echo "  --- coordinator log (tail):"; tail -15 "$dir/coordinator.log" | sed 's/^/  | /'
    fi
    # Nothing of this trial stays behind.
    for p in "$coord" "${w[@]}" $extra; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    PIDS=()
  done
done
chaos_summary
exit $overall
