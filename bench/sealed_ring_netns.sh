#!/usr/bin/env bash
# The sealed tcp ring against the plaintext ring on a network-bound link:
# each rank in its own network namespace, all joined by veth pairs to a
# bridge (in a namespace of its own: a switch), each rank's transmit rate
# limited by tc (a token bucket, tbf, on its veth's egress: a NIC of that
# line rate, full duplex). 64 MB all-reduces on 2 and 3 ranks.
#
#   sudo bench/sealed_ring_netns.sh [ROUNDS] [RATE...]
#       ROUNDS default 3; RATE a tc rate in mbit or gbit (default: 1gbit 10gbit),
#       or "none" (no limit: the bare veths, CPU-bound like loopback)
#   env: TROUPE_BUILD_DIR (the build), REPS (timed all-reduces per run,
#        default 9), WARMUP (default 2), MTU (default 1500), SEAL_HELPERS
#        (the sealed runs' --seal-helpers; default: from the cores, none
#        below 8)
#
# Root only (ip netns, tc). Everything it creates lives in namespaces named
# srn<pid>-*, which it deletes on exit, failure or Ctrl-C (deleting them
# deletes their veths and the bridge; nothing is created in the root
# namespace). Each rank is bench_tcp_allreduce --rank R --addresses ...
# inside `ip netns exec`; with --sealed each runs the real cluster handshake
# (shared secret) on each of its ring connections.
#
# First, per rate, a link check: one plain TCP stream from rank 0 to rank 1
# for about 1.5 s (python3), the rate it got in Gbit/s (payload), to show the
# limit holds. Then each round, for each rate, runs W=2 then W=3, plaintext
# then --sealed, alternating so that a change in the machine's load hits
# both alike. Prints every run, then per (rate, W) the median busbw over the
# rounds of each and their ratio (sealed / plaintext), the link's payload
# ceiling (rate/8 less the TCP/IP and Ethernet headers at this MTU), and
# rank 0's CPU time per all-reduce (cpu_ms, median) of each and their ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
bench=$build/bench/bench_tcp_allreduce
reps=${REPS:-9}
warmup=${WARMUP:-2}
mtu=${MTU:-1500}
port=29415  # below the ephemeral port range

if [ "$(id -u)" -ne 0 ]; then
  echo "sealed_ring_netns.sh: must run as root (it creates network namespaces, veths and tc qdiscs)" >&2
  exit 1
fi
[ -x "$bench" ] || { echo "sealed_ring_netns.sh: build it first: cmake --build $build --target bench_tcp_allreduce" >&2; exit 1; }
command -v python3 >/dev/null || { echo "sealed_ring_netns.sh: needs python3 (the link check)" >&2; exit 1; }

rounds=${1:-3}
shift || true
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1gbit 10gbit)
# bits per second of a tc rate ("none": 0)
rate_bps() {
  case $1 in
    none) echo 0 ;;
    *gbit) awk -v v="${1%gbit}" 'BEGIN { printf "%.0f", v * 1e9 }' ;;
    *mbit) awk -v v="${1%mbit}" 'BEGIN { printf "%.0f", v * 1e6 }' ;;
    *) echo "sealed_ring_netns.sh: rate '$1': give NNmbit, NNgbit or none" >&2; return 1 ;;
  esac
}
for r in "${rates[@]}"; do rate_bps "$r" >/dev/null; done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "sealed_ring_netns.sh: ROUNDS must be a positive number" >&2; exit 1; }

tag=srn$$
sw=$tag-sw
out=$(mktemp -d)
pids=()
made=()
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$out"
  exit "$code"
}
trap cleanup EXIT
trap 'echo "sealed_ring_netns.sh: interrupted" >&2; exit 130' INT TERM

# --- the network: a switch namespace with a bridge, a namespace per rank
ip netns add "$sw"; made+=("$sw")
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
addr() { echo "10.15.0.$(($1 + 1))"; }
for r in 0 1 2; do
  ns=$tag-$r
  ip netns add "$ns"; made+=("$ns")
  ip -n "$ns" link set lo up
  ip link add eth0 netns "$ns" mtu "$mtu" type veth peer name "p$r" netns "$sw" mtu "$mtu"
  ip -n "$sw" link set "p$r" master br0 up
  ip -n "$ns" addr add "$(addr "$r")/24" dev eth0
  ip -n "$ns" link set eth0 up
done

# tbf on each rank's egress: burst 1 ms at the rate (at least 64 KiB, so a
# whole GSO packet passes unsplit), a queue of up to 50 ms.
set_rate() {
  local bps; bps=$(rate_bps "$1")
  for r in 0 1 2; do
    tc -n "$tag-$r" qdisc del dev eth0 root 2>/dev/null || true
    if [ "$bps" -gt 0 ]; then
      local burst=$((bps / 8 / 1000)); [ "$burst" -ge 65536 ] || burst=65536
      tc -n "$tag-$r" qdisc add dev eth0 root tbf rate "$1" burst "$burst" latency 50ms
    fi
  done
}

# One TCP stream rank 0 -> rank 1 for about 1.5 s at the rate (10 s of
# data at most, 256 MiB at least without a limit); prints Gbit/s of payload
# from the receiver's first byte to its last.
link_check() {
  local bps mib; bps=$(rate_bps "$1")
  if [ "$bps" -gt 0 ]; then mib=$((bps * 3 / 2 / 8 / 1048576)); else mib=256; fi
  [ "$mib" -ge 16 ] || mib=16
  ip netns exec "$tag-1" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); buf = bytearray(1 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.monotonic()
    n += k
print("%.3f Gbit/s (%d MiB)" % (n * 8 / (time.monotonic() - t0) / 1e9, n >> 20))
' "$(addr 1)" $((port + 100)) >"$out/check" &
  local rx=$!; pids+=("$rx")
  for _ in $(seq 50); do grep -q ready "$out/check" 2>/dev/null && break; sleep 0.1; done
  ip netns exec "$tag-0" python3 -c '
import socket, sys, time
for attempt in range(50):  # the bridge may take a moment to forward
    try: c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); break
    except OSError:
        if attempt == 49: raise
        time.sleep(0.1)
c.settimeout(None); b = bytes(1 << 20)
for _ in range(int(sys.argv[3])): c.sendall(b)
c.close()
' "$(addr 1)" $((port + 100)) "$mib"
  wait "$rx"
  pids=()
  echo "link check $1: one TCP stream rank 0 -> rank 1: $(sed -n 2p "$out/check")"
}

# One run: W ranks, each in its namespace; leaves rank 0's RESULT line in
# $out/result. (Not in a $(...) subshell: the exit trap must see the pids.)
run_ring() {
  local w=$1 flag=$2 addrs="" r
  for ((r = 0; r < w; ++r)); do addrs+="${addrs:+,}$(addr "$r"):$port"; done
  pids=()
  for ((r = w - 1; r >= 0; --r)); do
    ip netns exec "$tag-$r" timeout -k 5 600 "$bench" --rank "$r" --addresses "$addrs" --sizes 64 \
      --reps "$reps" --warmup "$warmup" $flag >"$out/rank$r" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  pids=()
  if [ "$failed" -ne 0 ] || ! grep -q RESULT "$out/rank0"; then
    echo "sealed_ring_netns.sh: a rank failed (W=$w ${flag:-plaintext}):" >&2
    for ((r = 0; r < w; ++r)); do sed "s/^/  rank $r: /" "$out/rank$r" >&2; done
    return 1
  fi
  grep RESULT "$out/rank0" >"$out/result"
}

echo "sealed_ring_netns.sh: $rounds rounds, rates ${rates[*]}, $reps timed all-reduces after $warmup warm-ups per run, MTU $mtu, namespaces $tag-*"
for rate in "${rates[@]}"; do
  set_rate "$rate"
  link_check "$rate"
done
for ((k = 1; k <= rounds; ++k)); do
  for rate in "${rates[@]}"; do
    set_rate "$rate"
    for w in 2 3; do
      for mode in plain sealed; do
        flag=; [ "$mode" = sealed ] && flag="--sealed${SEAL_HELPERS:+ --seal-helpers $SEAL_HELPERS}"
        run_ring "$w" "$flag"
        line=$(cat "$out/result")
        echo "round $k rate $rate $line"
        sed -n 's/.*busbw_GBps=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/$rate-$mode-$w"
        sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line" >>"$out/$rate-cpu-$mode-$w"
      done
    done
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for rate in "${rates[@]}"; do
  # payload per Ethernet frame at this MTU: MTU - 52 (IPv4 20, TCP 20 + 12 of
  # timestamps) of MTU + 14 (the Ethernet header, which tbf counts)
  ceiling=$(awk -v b="$(rate_bps "$rate")" -v m="$mtu" 'BEGIN { printf "%.3f", b / 8e9 * (m - 52) / (m + 14) }')
  [ "$rate" = none ] && ceiling=none
  for w in 2 3; do
    p=$(median "$out/$rate-plain-$w"); s=$(median "$out/$rate-sealed-$w")
    pc=$(median "$out/$rate-cpu-plain-$w"); sc=$(median "$out/$rate-cpu-sealed-$w")
    echo "RESULT sealed-ring-netns rate=$rate world=$w size_MB=64 rounds=$rounds link_payload_GBps=$ceiling" \
         "plain_busbw_GBps=$p sealed_busbw_GBps=$s ratio=$(awk -v a="$s" -v b="$p" 'BEGIN { printf "%.2f", a / b }')" \
         "plain_cpu_ms=$pc sealed_cpu_ms=$sc cpu_ratio=$(awk -v a="$sc" -v b="$pc" 'BEGIN { printf "%.2f", a / b }')"
  done
done
