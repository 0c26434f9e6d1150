#!/usr/bin/env bash
# The sealed tcp ring (a cluster secret: every frame in AES-256-GCM records,
# net/tcp/sealed.hpp) against the plaintext ring (no secret: a CRC-32C per
# payload), 64 MB all-reduces on 2 and 3 ranks on loopback.
#
#   bench/sealed_ring.sh [ROUNDS]     # default 5; TROUPE_BUILD_DIR=... to pick the build
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

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((k = 1; k <= rounds; ++k)); do
  for w in 2 3; do
    for mode in plain sealed; do
      flag=; [ "$mode" = sealed ] && flag=--sealed
      line=$("$bench" --world "$w" --sizes 64 $flag | grep RESULT)
      echo "round $k $line"
      sed -n 's/.*busbw_GBps=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/$mode-$w"
      sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/cpu-$mode-$w"
    done
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for w in 2 3; do
  p=$(median "$out/plain-$w"); s=$(median "$out/sealed-$w")
  pc=$(median "$out/cpu-plain-$w"); sc=$(median "$out/cpu-sealed-$w")
  echo "RESULT sealed-ring world=$w size_MB=64 rounds=$rounds plain_busbw_GBps=$p sealed_busbw_GBps=$s" \
       "ratio=$(awk -v a="$s" -v b="$p" 'BEGIN { printf "%.2f", a / b }')" \
       "plain_cpu_ms=$pc sealed_cpu_ms=$sc cpu_ratio=$(awk -v a="$sc" -v b="$pc" 'BEGIN { printf "%.2f", a / b }')"
done
