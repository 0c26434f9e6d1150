#!/usr/bin/env bash
# The measurements that need idle cores, in one run that fits a lent device
# machine's 10-minute command (scripts/cpu-bench-bundle.sh carries the
# binaries there; docs/BENCHMARKS.md, "On idle cores"):
#
#   1. the machine: cores, CPU model, load
#   2. sealed links (part 15): one sealed 1 MiB frame against plaintext,
#      with 0, 1 and 3 seal helpers, each polling 0, 50 and 200 us for work
#      before it sleeps (bench_sealed_frame --spin-us)
#   3. sealed links (part 15): the sealed ring against the plaintext ring,
#      64 MB on 2 and 3 ranks, the sealed ring with each of SEALED_SPINS
#      (bench/sealed_ring.sh; goal: sealed busbw >= 0.90 of plaintext)
#   4. ps tasks (part 17): sync against async on 1 and 2 ps tasks, mlp and
#      cnn, and async on 2 with replicas polling 500 us for each answer (bench/
#      ps_tasks.sh, shortened; goals: async-2ps >= sync samples/s, push
#      round trip <= 2x one move)
#
#   build-dev/run.sh bench/idle_cores.sh            # on the device machine
#   build-dev/run.sh bench/idle_cores.sh 15         # the sealed links (part 15) only, with the whole budget
#   build-dev/run.sh bench/idle_cores.sh 17         # the ps tasks (part 17) only
#   TROUPE_BUILD_DIR=build bench/idle_cores.sh      # here, the same steps
#
# With `15` alone the ring runs a second time with 4 MiB chunks (fewer
# frames, so fewer of each frame's first and last records that no helper
# overlaps), and the frame bench with 4 MiB frames too.
#
# Environment: SEALED_ROUNDS (default 5), SEALED_SPINS (default "0 50 200"),
# PS_ROUNDS (default 3), PS_POLL_US (default 500; empty: no polling run), IDLE_BUDGET (seconds for all, default 540: the
# frame gets at most 90, the ring 180, the ps tasks what is left; a step cut
# short says so). Output to
# the terminal and, where the device tool gives one, $OUT/idle_cores.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
sealed_rounds=${SEALED_ROUNDS:-5}
sealed_spins=${SEALED_SPINS:-0 50 200}
ps_rounds=${PS_ROUNDS:-3}
ps_poll=${PS_POLL_US-500}  # async-2ps again with replicas polling for answers (empty: not)
parts=${1:-15 17}
case " $parts " in *" 15 "* | *" 17 "*) ;; *) echo "idle_cores.sh: which part, 15 or 17 (default both)?" >&2; exit 2 ;; esac
has() { [[ " $parts " == *" $1 "* ]]; }
end=$((SECONDS + ${IDLE_BUDGET:-540}))
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && exec > >(tee "$OUT/idle_cores.log") 2>&1; fi
section() { printf '\n==== %s (%d s left) ====\n' "$1" $((end - SECONDS)); }
# Runs "$@" for at most `most` s, and at most what is left of the budget.
step() {
  local most=$1; shift
  local left=$((end - SECONDS))
  ((left < most)) && most=$left
  if ((most < 10)); then echo "skipped: the budget is spent"; return; fi
  timeout "$most" "$@"
  local rc=$?
  ((rc == 124)) && echo "cut short after $most s"
  ((rc != 0 && rc != 124)) && echo "exit status $rc"
}

section "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
echo "cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 "model name" /proc/cpuinfo
[[ -f $build/MANIFEST ]] && sed -n 2,3p "$build/MANIFEST"

if has 15; then
  section "sealed links: one 1 MiB frame, sealed and plaintext (bench_sealed_frame)"
  step 90 "$build/bench/bench_sealed_frame" --reps 200 --helpers 0,1,3 --spin-us "${sealed_spins// /,}"

  section "sealed links: the sealed ring against the plaintext ring (bench/sealed_ring.sh $sealed_rounds)"
  step 180 env TROUPE_BUILD_DIR="$build" SPINS="$sealed_spins" "$root/bench/sealed_ring.sh" "$sealed_rounds"

  if ! has 17; then
    section "sealed links: one 4 MiB frame (bench_sealed_frame --size-kb 4096)"
    step 90 "$build/bench/bench_sealed_frame" --size-kb 4096 --reps 100 --helpers 0,3 --spin-us "${sealed_spins// /,}"
    section "sealed links: the rings with 4 MiB chunks (CHUNK_KB=4096 bench/sealed_ring.sh $sealed_rounds)"
    step 180 env TROUPE_BUILD_DIR="$build" SPINS="$sealed_spins" CHUNK_KB=4096 "$root/bench/sealed_ring.sh" "$sealed_rounds"
  fi
fi

if has 17; then
  section "ps tasks: sync and async on ps tasks (bench/ps_tasks.sh, $ps_rounds round(s), mlp 2 epochs, cnn 1)"
  step 600 env ROUNDS="$ps_rounds" EPOCHS_MLP=2 EPOCHS_CNN=1 POLL_US="$ps_poll" "$root/bench/ps_tasks.sh" "$build"
fi
section "done"
