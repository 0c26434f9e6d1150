#!/usr/bin/env bash
# The sealed tcp ring (a cluster secret: every frame in AES-256-GCM records,
# net/tcp/sealed.hpp) against the plaintext ring (no secret: a CRC-32C per
# payload), 64 MB all-reduces on 2 and 3 ranks on loopback.
#
#   bench/sealed_ring.sh [ROUNDS]     # default 5; TROUPE_BUILD_DIR=... to pick the build
#   SPINS="0 50 200"                  # the sealed ring once per value of --seal-spin-us
#                                     # (how long seal helpers poll before they sleep; default 0)
#   CHUNK_KB=1024                     # the ring's chunk, both rings
#
# Each round runs bench_tcp_allreduce plaintext then --sealed, for W=2 then
# W=3 (15 timed all-reduces after 3 warm-ups each, the median busbw per run),
# alternating so that a change in the machine's load hits both alike. Prints
# every run, then per W the median over the rounds of each and their ratio
# (sealed / plaintext), and the same for rank 0's CPU time per all-reduce
# (cpu_ms; sealed / plaintext: what sealing costs in CPU, which a loaded
# machine disturbs far less than the wall-clock figures).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
rounds=${1:-5}
bench=$build/bench/bench_tcp_allreduce
[ -x "$bench" ] || { echo "sealed_ring.sh: build it first: cmake --build $build --target bench_tcp_allreduce" >&2; exit 1; }

spins=(${SPINS:-0})
chunk_kb=${CHUNK_KB:-1024}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((k = 1; k <= rounds; ++k)); do
  for w in 2 3; do
    for mode in plain "${spins[@]/#/sealed}"; do
      flag=; [ "$mode" != plain ] && flag="--sealed --seal-spin-us ${mode#sealed}"
      line=$("$bench" --world "$w" --sizes 64 --chunk-kb "$chunk_kb" $flag | grep RESULT)
      echo "round $k $line"
      sed -n 's/.*busbw_GBps=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/$mode-$w"
      sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/cpu-$mode-$w"
    done
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for w in 2 3; do
  for spin in "${spins[@]}"; do
    p=$(median "$out/plain-$w"); s=$(median "$out/sealed$spin-$w")
    pc=$(median "$out/cpu-plain-$w"); sc=$(median "$out/cpu-sealed$spin-$w")
    echo "RESULT sealed-ring world=$w size_MB=64 chunk_KB=$chunk_kb rounds=$rounds seal_spin_us=$spin" \
         "plain_busbw_GBps=$p sealed_busbw_GBps=$s ratio=$(awk -v a="$s" -v b="$p" 'BEGIN { printf "%.2f", a / b }')" \
         "plain_cpu_ms=$pc sealed_cpu_ms=$sc cpu_ratio=$(awk -v a="$sc" -v b="$pc" 'BEGIN { printf "%.2f", a / b }')"
  done
done
